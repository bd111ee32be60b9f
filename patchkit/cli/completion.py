"""Shell completion scripts, generated from the CLI's own parser (so they never fall behind).

`patchkit completion bash|zsh|fish` prints a script: commands, each command's options, and
files for the arguments that name files (recipes, inventories, outputs).
"""

from __future__ import annotations

import argparse
import shlex

from patchkit.cli.parser import subcommands

SHELLS = ("bash", "zsh", "fish")
_FILE_ARGS = {"recipe", "inventory", "html", "markdown", "output", "wheel"}


def _flags(command: argparse.ArgumentParser) -> list[str]:
    return sorted(flag for action in command._actions for flag in action.option_strings)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    commands = subcommands(parser)
    if shell == "bash":
        cases = "\n".join(f"    {name}) opts={shlex.quote(' '.join(_flags(cmd)))} ;;" for name, cmd in commands.items())
        return f"""# patchkit bash completion: eval "$(patchkit completion bash)"
_patchkit() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" opts="" w
  for w in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
    case "$w" in -*) ;; *) cmd=$w; break ;; esac
  done
  case "$cmd" in
{cases}
    *) COMPREPLY=($(compgen -W {shlex.quote(' '.join(commands))} -- "$cur")); return ;;
  esac
  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur")); else COMPREPLY=($(compgen -f -- "$cur")); fi
}}
complete -o filenames -F _patchkit patchkit
"""
    if shell == "zsh":
        return "#compdef patchkit\n# patchkit zsh completion: eval \"$(patchkit completion zsh)\"\n" \
               "autoload -U bashcompinit && bashcompinit\n" + script(parser, "bash").split("\n", 1)[1]
    lines = ["# patchkit fish completion: patchkit completion fish | source", "complete -c patchkit -f"]
    for name, cmd in commands.items():
        lines.append(f"complete -c patchkit -n __fish_use_subcommand -a {name} -d {shlex.quote(cmd.description or name)}")
        for action in cmd._actions:
            longs = [f[2:] for f in action.option_strings if f.startswith("--")]
            shorts = [f[1:] for f in action.option_strings if not f.startswith("--")]
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            opts = " ".join([f"-l {long}" for long in longs] + [f"-s {short}" for short in shorts])
            files = " -r -F" if action.dest in _FILE_ARGS else " -r" if action.nargs != 0 else ""
            help_text = shlex.quote((action.help or "").split("(")[0].strip() or action.dest)
            lines.append(f"complete -c patchkit -n '__fish_seen_subcommand_from {name}' {opts}{files} -d {help_text}")
    return "\n".join(lines) + "\n"
