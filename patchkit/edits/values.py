"""The CST node for what a `value`/`expr` edit wants (see specs.WantsValue)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from patchkit.edits.base import expression_node, literal_node

if TYPE_CHECKING:
    from patchkit.edits.specs import WantsValue


def wanted_node(spec: WantsValue, quote: str = '"') -> cst.BaseExpression:
    if spec.expr is not None:
        return expression_node(spec.expr)
    if isinstance(spec.value, (list, dict, tuple)):
        return cst.parse_expression(repr(spec.value))
    return literal_node(spec.value, quote)
