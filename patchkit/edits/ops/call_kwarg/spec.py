"""call_kwarg's parameters, as a recipe writes them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from patchkit.edits.model import EditResult
from patchkit.edits.ops import EngineSpec
from patchkit.edits.targets import CallValue, check_callee, check_identifier


class CallKwarg(EngineSpec, CallValue):
    """Ensure a call to `callee` passes `keyword=value` (added when missing)."""

    kind: ClassVar[str] = "call_kwarg"
    callee: str | list[str] = Field(
        description="the called expression as written: `SamplingParams`, `torch.compile`, "
                    "`super().__init__`, `', '.join`; a list gives alternatives")
    keyword: str = Field(description="the keyword argument's name (a Python name, not a keyword like `class`)")

    @field_validator("keyword")
    @classmethod
    def _keyword_is_a_name(cls, value: str) -> str:
        check_identifier(value, "keyword")
        return value

    @field_validator("callee")
    @classmethod
    def _callee_is_an_expression(cls, value: str | list[str]) -> str | list[str]:
        check_callee(value)
        return value

    @property
    def callees(self) -> list[str]:
        return [self.callee] if isinstance(self.callee, str) else list(self.callee)

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.ops.call_kwarg.engine import run

        return run(self, source, self.callees, self.keyword)
