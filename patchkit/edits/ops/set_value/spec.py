"""set_value's parameters, as a recipe writes them."""

from __future__ import annotations

from typing import ClassVar

from patchkit.edits.model import EditResult
from patchkit.edits.ops import EngineSpec
from patchkit.edits.targets import ValueAt


class SetValue(EngineSpec, ValueAt):
    """Ensure the target's value (or the part of it at `path`) equals `value`/`expr`, by meaning."""

    kind: ClassVar[str] = "set_value"

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.ops.set_value.engine import run

        return run(self, source)
