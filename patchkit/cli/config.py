"""Defaults an operator sets once: configuration files and the environment, and where each
value came from.

Precedence, the first that sets a key wins (`-v` logs each value a source set, and the source):

1. the command line (`--state-dir DIR`, `-i INV`, ...);
2. the environment: PATCHKIT_INVENTORY (several: separated by `:`), PATCHKIT_STATE_DIR,
   PATCHKIT_CONCURRENCY, PATCHKIT_LOCK_TIMEOUT, PATCHKIT_LOG_FORMAT;
3. the project file: the first `patchkit.toml` in the working folder or a folder above it;
4. the user file: `$XDG_CONFIG_HOME/patchkit/config.toml` (default `~/.config/patchkit/`);
5. patchkit's own default.

Both files hold the same keys at the top level (TOML):

    inventory = ["inventories/gpu.yml"]   # relative paths: to the file's folder
    state_dir = "/var/lib/patchkit"       # on the hosts
    concurrency = 16
    lock_timeout = 120
    log_format = "json"

A file is read only when the user running patchkit (or root) owns it and no one else may
write it, nor its folder: a defaults file another user could write would choose the
inventory, and so the hosts, of the next run. Anything else about a file (unreadable,
not TOML, an unknown key, a wrong type) is a usage error naming the file: one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from patchkit.base.errors import UsageError

PROJECT_FILE = "patchkit.toml"


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("a whole number, at least 1")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise ValueError("a number of seconds, 0 or more")
    return float(value)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a non-empty string")
    return value


def _log_format(value: Any) -> str:
    if value not in ("console", "json"):
        raise ValueError("console or json")
    return str(value)


def _paths(value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError("a path or a list of paths")
    return list(items)


@dataclass(frozen=True)
class Key:
    check: Callable[[Any], Any]
    env: str
    from_env: Callable[[str], Any]
    relative_paths: bool = False  # values are paths on the control machine: relative to the file


def _env_number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text  # the key's check names what it wants


# The values when nothing sets a key. The parser's defaults for these flags are None (or an
# empty list), so that a flag given on the command line is told from one left out.
DEFAULTS: dict[str, Any] = {"inventory": [], "state_dir": None, "concurrency": 32, "lock_timeout": 60.0,
                            "log_format": "console"}

KEYS: dict[str, Key] = {
    "inventory": Key(_paths, "PATCHKIT_INVENTORY", lambda text: [p for p in text.split(":") if p], relative_paths=True),
    "state_dir": Key(_text, "PATCHKIT_STATE_DIR", str),
    "concurrency": Key(_positive_int, "PATCHKIT_CONCURRENCY", _env_number),
    "lock_timeout": Key(_seconds, "PATCHKIT_LOCK_TIMEOUT", _env_number),
    "log_format": Key(_log_format, "PATCHKIT_LOG_FORMAT", str),
}


@dataclass
class Settings:
    """The configured value of each key that something set, and where it came from."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def used(self, given_on_command_line: set[str]) -> list[tuple[str, Any, str]]:
        """(key, value, source) of each key a source set and the command line did not: what -v logs."""
        return [(key, self.values[key], self.sources[key]) for key in KEYS
                if key in self.values and key not in given_on_command_line]


def _trusted(path: Path) -> str | None:
    """Why `path` may not be trusted (None: it may): someone other than this user or root
    owns it or its folder, or can write either."""
    me = os.geteuid()
    for item in (path, path.parent):
        info = item.stat()
        if info.st_uid not in (me, 0):
            return f"{item} belongs to another user (uid {info.st_uid})"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (item.is_dir() and info.st_mode & stat.S_ISVTX):
            return f"{item} is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _read_file(path: Path) -> dict[str, tuple[Any, str]]:
    """The keys of one file, checked: key -> (value, source)."""
    if path.is_symlink():
        resolved = path.resolve()
        why = _trusted(resolved) if resolved.is_file() else f"{path} is a symlink to no file"
    else:
        why = _trusted(path)
    if why:
        raise UsageError(f"{path}: not read: {why}")
    import tomllib  # only when there is a file: most runs have none

    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not TOML: {exc}") from None
    found: dict[str, tuple[Any, str]] = {}
    for key, value in document.items():
        spec = KEYS.get(key)
        if spec is None:
            import difflib

            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(KEYS)})"
            raise UsageError(f"{path}: unknown key {key!r}{hint}")
        try:
            checked = spec.check(value)
        except ValueError as exc:
            raise UsageError(f"{path}: {key} must be {exc}, not {value!r}") from None
        if spec.relative_paths:
            checked = [str(path.parent / p) if not os.path.isabs(os.path.expanduser(p)) else os.path.expanduser(p)
                       for p in checked]
        found[key] = (checked, str(path))
    return found


def project_file(start: Path) -> Path | None:
    """The first patchkit.toml in `start` or a folder above it."""
    for folder in (start, *start.parents):
        candidate = folder / PROJECT_FILE
        if candidate.is_file() or candidate.is_symlink():
            return candidate
    return None


def user_file(environ: dict[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(base) / "patchkit" / "config.toml"


def load(cwd: Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Every key set by the environment or a file, the stronger source winning."""
    environ = dict(os.environ) if environ is None else environ
    settings = Settings()
    layers: list[dict[str, tuple[Any, str]]] = []
    user = user_file(environ)
    if user.is_file() or user.is_symlink():
        layers.append(_read_file(user))
    project = project_file((cwd or Path.cwd()).absolute())
    if project is not None:
        layers.append(_read_file(project))
    from_env: dict[str, tuple[Any, str]] = {}
    for key, spec in KEYS.items():
        text = environ.get(spec.env)
        if text is None:
            continue
        if not text.strip():
            raise UsageError(f"{spec.env} is empty: unset it or give a value")
        try:
            from_env[key] = (spec.check(spec.from_env(text)), spec.env)
        except ValueError as exc:
            raise UsageError(f"{spec.env} must be {exc}, not {text!r}") from None
    layers.append(from_env)
    for layer in layers:  # weakest first: a later layer overwrites
        for key, (value, source) in layer.items():
            settings.values[key] = value
            settings.sources[key] = source
    return settings


def apply_settings(args: argparse.Namespace, cwd: Path | None = None, environ: dict[str, str] | None = None) -> None:
    """Fill each configurable option the command has and the command line left out: from the
    environment or a file, else patchkit's default (`args.configured`: what came from where)."""
    present = [key for key in KEYS if hasattr(args, key)]
    if not present:
        return
    settings = load(cwd, environ)
    given = {key for key in present if getattr(args, key) not in (None, [])}
    for key in present:
        if key not in given:
            setattr(args, key, settings.values.get(key, DEFAULTS[key]))
    args.configured = settings.used(given)  # logged under -v once the command's checks passed
