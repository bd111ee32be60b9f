"""list_insert's parameters, as a recipe writes them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from patchkit.edits.model import EditResult, Scalar
from patchkit.edits.ops import EngineSpec
from patchkit.edits.targets import Where


class ListInsert(EngineSpec, Where):
    """Ensure `values` are elements of a list/tuple/set display (the right one of `A + [..]`)."""

    kind: ClassVar[str] = "list_insert"
    values: list[Scalar] = Field(min_length=1, description="literals that must be elements")
    after: Scalar = Field(None, description="insert after this element; missing: append, and say so")

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.ops.list_insert.engine import run

        return run(self, source, self.values, self.after)
