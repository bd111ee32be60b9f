"""The edge: arguments in, one report out, an exit code.

Exit codes: 0 every host fine; 1 a host failed; 2 usage or recipe error (nothing
contacted); 3 for `status`: a host is drifted or pending.

`main` parses the arguments (cli/parser.py), runs the command's function (cli/commands.py,
`COMMANDS`) inside the start-up path (cli/startup.py) and turns a usage error into its one
line (and, under --json, its one JSON document).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from patchkit.cli import startup
from patchkit.cli.commands import COMMANDS, EXIT_INTERRUPTED, EXIT_USAGE
from patchkit.cli.parser import build_parser, command_first, refuse_empty


def main(argv: Sequence[str] | None = None) -> int:
    with startup.starting():  # no collection over the start's objects
        code = _main(argv)
    sys.exit(code)


def _main(argv: Sequence[str] | None) -> int:
    from patchkit.base.errors import UsageError

    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    json_out = "--json" in tokens[:tokens.index("--")] if "--" in tokens else "--json" in tokens
    if not tokens:  # no command is a usage error, but a bare `patchkit` is asking what there is: the help
        print("patchkit: no command given; here is the help:\n\n" + parser.format_help(), end="", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(command_first(parser, tokens))
        refuse_empty(parser, args)
        from patchkit.cli.config import apply_settings

        apply_settings(args)  # what the command line left out: from PATCHKIT_* and the config files
        command = COMMANDS[args.command]
        with startup.command_start(command.reaches_hosts and bool(getattr(args, "inventory", None))):
            code = command.run(args)
    except UsageError as exc:
        print(f"patchkit: {exc}", file=sys.stderr)
        if json_out:  # stdout still gets its one document
            from patchkit.run.results import REPORT_SCHEMA_VERSION

            print(json.dumps({"schema_version": REPORT_SCHEMA_VERSION, "error": {"kind": "usage",
                              "message": str(exc).split(chr(10))[0]}, "exit_code": EXIT_USAGE}, indent=2))
        code = EXIT_USAGE
    except KeyboardInterrupt:
        print("patchkit: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    return code


if __name__ == "__main__":
    main()
