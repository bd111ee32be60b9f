"""Checkpoint reading (torch-free, shippable to hosts) and validators pluggable by name.

    view = read_checkpoint(path)                 # runs anywhere, Python >= 3.8, stdlib only
    problems = validate("eagle3-drafter", view, target={"hidden_size": 4096, ...})

``reader_source()`` is the text of ``reader.py``. The host agent ships this same file
(ahead of host/remote/checkpoint.py, see host/agent/client.py): one copy, both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from patchkit.host.checkpoint.eagle3 import validate_eagle3_drafter
from patchkit.host.checkpoint.reader import read_checkpoint

Validator = Callable[[dict[str, Any], "dict[str, Any] | None"], "list[str]"]

VALIDATORS: dict[str, Validator] = {
    "eagle3-drafter": validate_eagle3_drafter,
}

READER_PATH = Path(__file__).with_name("reader.py")


def validate(name: str, view: dict[str, Any], target: dict[str, Any] | None = None) -> list[str]:
    """Run the validator called ``name`` on a ``read_checkpoint`` view; ``[]`` is valid."""
    try:
        validator = VALIDATORS[name]
    except KeyError:
        raise KeyError(f"unknown checkpoint validator {name!r}; known: "
                       f"{', '.join(sorted(VALIDATORS))}") from None
    return validator(view, target)


def reader_source() -> str:
    """Source of the stdlib-only reader, to run on a host (Python >= 3.8)."""
    return READER_PATH.read_text(encoding="utf-8")


__all__ = ["VALIDATORS", "READER_PATH", "read_checkpoint", "reader_source", "validate",
           "validate_eagle3_drafter"]
