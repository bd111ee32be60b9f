"""dict_set's parameters, as a recipe writes them."""

from __future__ import annotations

from typing import ClassVar

from patchkit.edits.model import EditResult, Scalar
from patchkit.edits.ops import EngineSpec
from patchkit.edits.targets import ValueAt


class DictSet(EngineSpec, ValueAt):
    """Ensure a dict display maps `key` to `value`/`expr` (the last of duplicate keys: Python keeps it)."""

    kind: ClassVar[str] = "dict_set"
    key: Scalar

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.ops.dict_set.engine import run

        return run(self, source, self.key)
