"""The right-hand side an edit wants: a YAML value (`value`) or Python source (`expr`)."""

from __future__ import annotations

from typing import Any

import libcst as cst
from pydantic import BaseModel, Field, model_validator

from patchkit.edits.base import EditError, expression_node, literal_node


class WantsValue(BaseModel):
    value: Any = Field(None, description="a literal (string, number, bool, null, list, dict)")
    expr: str | None = Field(None, description="Python expression source, for non-literals")

    @model_validator(mode="after")
    def _one_of_value_or_expr(self) -> "WantsValue":
        given = ("value" in self.model_fields_set) + (self.expr is not None)
        if given != 1:
            raise ValueError("give exactly one of `value` or `expr`")
        if self.expr is not None:
            try:
                expression_node(self.expr)
            except EditError as exc:  # a recipe error, not a target that is missing
                raise ValueError(str(exc)) from None
        return self

    def wanted_node(self, quote: str = '"') -> cst.BaseExpression:
        if self.expr is not None:
            return expression_node(self.expr)
        if isinstance(self.value, (list, dict, tuple)):
            return cst.parse_expression(repr(self.value))
        return literal_node(self.value, quote)

    def describe(self) -> str:
        return self.expr if self.expr is not None else repr(self.value)
