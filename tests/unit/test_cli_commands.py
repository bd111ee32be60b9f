"""The CLI's table of commands and its parser name the same commands: a command the parser
accepts always has its function (else `patchkit NEW` would end in a KeyError's traceback),
and no function is left that no command line reaches."""

from __future__ import annotations

from patchkit.cli.commands import COMMANDS
from patchkit.cli.parser import build_parser, subcommands


def test_every_command_the_parser_knows_has_its_function_and_no_other() -> None:
    assert set(subcommands(build_parser())) == set(COMMANDS)
    for name, command in COMMANDS.items():
        assert callable(command.run) and command.run.__doc__, name  # its docstring is what the command does
