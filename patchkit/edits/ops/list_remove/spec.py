"""list_remove's parameters, as a recipe writes them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from patchkit.edits.model import EditResult, Scalar
from patchkit.edits.ops import EngineSpec
from patchkit.edits.targets import Where


class ListRemove(EngineSpec, Where):
    """Ensure `values` are not elements of a list/tuple/set display."""

    kind: ClassVar[str] = "list_remove"
    values: list[Scalar] = Field(min_length=1)

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.ops.list_remove.engine import run

        return run(self, source, self.values)
