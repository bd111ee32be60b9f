"""The CST node for what a `value`/`expr` edit wants (see specs.WantsValue)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from patchkit.edits.base import EditError, Layout, expression_node, literal_node

if TYPE_CHECKING:
    from patchkit.edits.specs import WantsValue


def wanted_node(spec: WantsValue, quote: str = '"', layout: Layout = Layout()) -> cst.BaseExpression:
    """`expr` parsed, or `value` written in the file's quote style; inside an f-string's
    braces, in a quote the f-string does not use (or an EditError when it cannot be)."""
    if spec.expr is not None:
        if layout.avoid and ("\\" in spec.expr or any(q in spec.expr for q in layout.avoid)):
            raise EditError(f"expr {spec.expr!r} cannot go inside an f-string's braces (its quotes or backslashes)")
        return expression_node(spec.expr)
    return literal_node(spec.value, layout.quote(quote), layout.avoid)
