"""Insert into and remove from bracketed sequences (list, tuple, set, dict) keeping layout.

The layout rules a human would follow:
- a one-line sequence stays on one line, new items joined with the existing separator;
- a one-item-per-line sequence gets each new item on its own line, same indentation,
  same trailing-comma habit;
- comments stay on the line of the item they were written on, comment-only lines
  stay in front of the item they precede.

libcst keeps the whitespace after an item in that item's comma, and the whitespace
before the closing bracket on the bracket; everything below is bookkeeping of those two.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

import libcst as cst

from patchkit.edits.base import EditError

Seq = cst.List | cst.Tuple | cst.Set | cst.Dict
Item = TypeVar("Item", cst.Element, cst.BaseDictElement)

SEQUENCE_TYPES = (cst.List, cst.Tuple, cst.Set, cst.Dict)
_CLEAN_LINE = cst.TrailingWhitespace()


def _close_ws(node: Seq) -> cst.BaseParenthesizableWhitespace | None:
    if isinstance(node, cst.List):
        return node.rbracket.whitespace_before
    if isinstance(node, (cst.Set, cst.Dict)):
        return node.rbrace.whitespace_before
    return node.rpar[0].whitespace_before if node.rpar else None


def _open_ws(node: Seq) -> cst.BaseParenthesizableWhitespace | None:
    if isinstance(node, cst.List):
        return node.lbracket.whitespace_after
    if isinstance(node, (cst.Set, cst.Dict)):
        return node.lbrace.whitespace_after
    return node.lpar[0].whitespace_after if node.lpar else None


def _with_close_ws(node: Seq, ws: cst.BaseParenthesizableWhitespace) -> Seq:
    if isinstance(node, cst.List):
        return node.with_changes(rbracket=node.rbracket.with_changes(whitespace_before=ws))
    if isinstance(node, (cst.Set, cst.Dict)):
        return node.with_changes(rbrace=node.rbrace.with_changes(whitespace_before=ws))
    rpar = [node.rpar[0].with_changes(whitespace_before=ws), *node.rpar[1:]]
    return node.with_changes(rpar=rpar)


def _comma_ws(item: cst.CSTNode) -> cst.BaseParenthesizableWhitespace | None:
    comma = getattr(item, "comma", None)
    return comma.whitespace_after if isinstance(comma, cst.Comma) else None


def _item_indent(node: Seq) -> cst.SimpleWhitespace | None:
    """Indentation of items in a one-item-per-line sequence, None if not multi-line."""
    candidates = [_open_ws(node)] + [_comma_ws(e) for e in node.elements]
    for ws in candidates:
        if isinstance(ws, cst.ParenthesizedWhitespace):
            return ws.last_line
    return None


def _line_break(indent: cst.SimpleWhitespace, first_line: cst.TrailingWhitespace = _CLEAN_LINE,
                empty_lines: Sequence[cst.EmptyLine] = ()) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=first_line, empty_lines=list(empty_lines), indent=True, last_line=indent
    )


def _inline_separator(elements: Sequence[cst.CSTNode]) -> cst.Comma:
    for item in elements[:-1]:
        comma = getattr(item, "comma", None)
        if isinstance(comma, cst.Comma) and not isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
            return comma
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _has_comma(item: cst.CSTNode) -> bool:
    return isinstance(getattr(item, "comma", None), cst.Comma)


def _comma(item: cst.CSTNode) -> cst.Comma:
    """The item's comma, where the caller read whitespace from it (so it has one)."""
    comma = getattr(item, "comma", None)
    assert isinstance(comma, cst.Comma)
    return comma


def insert_item(node: Seq, item: Item, index: int, unit: str = "    ") -> Seq:
    """Return `node` with `item` inserted at `index`, laid out like its neighbours.

    `unit` is the file's indentation step, for an empty display written over several lines."""
    if not isinstance(node, SEQUENCE_TYPES):
        raise EditError(f"the value is not a list, tuple, set or dict literal (libcst node: {type(node).__name__})")
    elements = list(node.elements)
    item = item.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    indent = _item_indent(node)
    close = _close_ws(node)

    if not elements:
        open_ws = _open_ws(node)
        if isinstance(open_ws, cst.ParenthesizedWhitespace):
            return _into_empty_block(node, item, open_ws, unit)
        return node.with_changes(elements=[item])

    if index < len(elements):
        before = elements[index - 1] if index > 0 else None
        if before is None:
            # Inserting first: the new item takes the place right after the opening bracket.
            sep = _separator_for_front(elements, indent)
            elements.insert(0, item.with_changes(comma=sep))
            return node.with_changes(elements=elements)
        before_ws = _comma_ws(before)
        if indent is not None and isinstance(before_ws, cst.ParenthesizedWhitespace):
            # before's comment stays on before's line; comment lines stay ahead of the next item.
            elements[index - 1] = before.with_changes(
                comma=_comma(before).with_changes(whitespace_after=_line_break(indent, before_ws.first_line))
            )
            new_comma: cst.Comma | cst.MaybeSentinel = cst.Comma(
                whitespace_after=_line_break(before_ws.last_line, _CLEAN_LINE, before_ws.empty_lines))
        else:
            new_comma = before.comma if _has_comma(before) else _inline_separator(elements)
        elements.insert(index, item.with_changes(comma=new_comma))
        return node.with_changes(elements=elements)

    last = elements[-1]
    trailing = _has_comma(last)
    if indent is not None and isinstance(close, cst.ParenthesizedWhitespace):
        # One item per line: last item's line keeps its comment; new item on its own line.
        elements[-1] = last.with_changes(
            comma=cst.Comma(whitespace_after=_line_break(indent, close.first_line))
        )
        last_comma: cst.Comma | cst.MaybeSentinel = cst.Comma() if trailing else cst.MaybeSentinel.DEFAULT
        elements.append(item.with_changes(comma=last_comma))
        new_close = _line_break(close.last_line, _CLEAN_LINE, close.empty_lines)
        return _with_close_ws(node.with_changes(elements=elements), new_close)

    # Inline (or hanging) layout: reuse the separator between the previous two items.
    if len(elements) >= 2 and _has_comma(elements[-2]):
        sep = _comma(elements[-2])
        if isinstance(sep.whitespace_after, cst.ParenthesizedWhitespace):
            sep = cst.Comma(whitespace_after=_line_break(sep.whitespace_after.last_line))
    else:
        sep = _inline_separator(elements)
    elements[-1] = last.with_changes(comma=sep)
    keep_trailing = trailing and not (isinstance(node, cst.Tuple) and len(elements) == 1)
    elements.append(item.with_changes(comma=cst.Comma() if keep_trailing else cst.MaybeSentinel.DEFAULT))
    return node.with_changes(elements=elements)


def _into_empty_block(node: Seq, item: Item, open_ws: cst.ParenthesizedWhitespace, unit: str) -> Seq:
    """`[\n]` -> `[\n    item,\n]`: the item one indent deeper than the closing bracket, with
    a trailing comma; a comment after the opening bracket stays there, comment-only lines
    stay last (as they do below the last item of a list that has items)."""
    close_indent = open_ws.last_line
    item_ws = open_ws.with_changes(empty_lines=[], last_line=cst.SimpleWhitespace(close_indent.value + unit))
    close_ws = open_ws.with_changes(first_line=_CLEAN_LINE)
    node = _with_open_ws(node, item_ws)
    node = node.with_changes(elements=[item.with_changes(comma=cst.Comma())])
    return _with_close_ws(node, close_ws)


def _separator_for_front(elements: Sequence[cst.CSTNode], indent: cst.SimpleWhitespace | None) -> cst.Comma:
    if indent is not None:
        return cst.Comma(whitespace_after=_line_break(indent))
    return _inline_separator(elements) if len(elements) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _with_open_ws(node: Seq, ws: cst.BaseParenthesizableWhitespace) -> Seq:
    if isinstance(node, cst.List):
        return node.with_changes(lbracket=node.lbracket.with_changes(whitespace_after=ws))
    if isinstance(node, (cst.Set, cst.Dict)):
        return node.with_changes(lbrace=node.lbrace.with_changes(whitespace_after=ws))
    lpar = [node.lpar[0].with_changes(whitespace_after=ws), *node.lpar[1:]]
    return node.with_changes(lpar=lpar)


def remove_item(node: Seq, index: int) -> Seq:
    """Return `node` without the item at `index`, neighbours' layout kept.

    Comment-only lines in front of the removed item go with it; the comment on
    the line of a neighbour stays with that neighbour.
    """
    elements = list(node.elements)
    removed = elements.pop(index)
    removed_ws = _comma_ws(removed)
    if not elements:
        if isinstance(node, cst.Tuple) and not node.lpar:
            raise EditError("removing the only element of an unparenthesized tuple")
        if isinstance(node, cst.Set):
            raise EditError("removing the only element of a set literal ({} would be a dict)")
        return _emptied(node)

    if index < len(elements):
        # The gap before the next item now follows the previous item (or the bracket).
        lines_before_next = removed_ws.empty_lines if isinstance(removed_ws, cst.ParenthesizedWhitespace) else None
        if index == 0:
            open_ws = _open_ws(node)
            if isinstance(open_ws, cst.ParenthesizedWhitespace) and lines_before_next is not None:
                node = _with_open_ws(node, open_ws.with_changes(empty_lines=lines_before_next))
        else:
            prev = elements[index - 1]
            prev_ws = _comma_ws(prev)
            if isinstance(prev_ws, cst.ParenthesizedWhitespace) and lines_before_next is not None:
                elements[index - 1] = prev.with_changes(
                    comma=_comma(prev).with_changes(whitespace_after=prev_ws.with_changes(empty_lines=lines_before_next))
                )
        return node.with_changes(elements=elements)

    # The removed item was last: its predecessor inherits its trailing-comma habit.
    prev = elements[-1]
    prev_ws = _comma_ws(prev)
    single_tuple = isinstance(node, cst.Tuple) and len(elements) == 1
    if _has_comma(removed):
        comma: cst.Comma | cst.MaybeSentinel = removed.comma
    else:
        comma = cst.Comma() if single_tuple else cst.MaybeSentinel.DEFAULT
    elements[-1] = prev.with_changes(comma=comma)
    close = _close_ws(node)
    if isinstance(prev_ws, cst.ParenthesizedWhitespace) and isinstance(close, cst.ParenthesizedWhitespace):
        node = _with_close_ws(node, close.with_changes(first_line=prev_ws.first_line))
    return node.with_changes(elements=elements)


def _emptied(node: Seq) -> Seq:
    """`node` with no items: `[]`, unless a comment on the opening bracket's line or a
    comment-only line before the closing bracket (neither is an item's) must survive."""
    open_ws, close = _open_ws(node), _close_ws(node)
    comment = open_ws.first_line if isinstance(open_ws, cst.ParenthesizedWhitespace) else _CLEAN_LINE
    tail = close.empty_lines if isinstance(close, cst.ParenthesizedWhitespace) else ()
    node = node.with_changes(elements=[])
    if comment.comment is None and not any(line.comment for line in tail):
        node = _with_open_ws(node, cst.SimpleWhitespace("")) if open_ws is not None else node
        return _with_close_ws(node, cst.SimpleWhitespace(""))
    last_line = close.last_line if isinstance(close, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace("")
    node = _with_open_ws(node, cst.ParenthesizedWhitespace(comment, list(tail), True, last_line))
    return _with_close_ws(node, cst.SimpleWhitespace(""))
