"""Characters a reader cannot see, made visible: every review output shows text through here.

Bidirectional controls (U+202A-202E, U+2066-2069) make an editor or a browser show code in
an order other than the one Python reads it in ("Trojan Source"); zero-width and other
format characters, control characters and line separators hide text or split a line where
Python sees none. A reviewer approves what is shown, so each such character is shown as
`<U+202E>`, and the output says at its top how many it holds, as code hosts do.
`Reveal` is the one place that decides which characters those are and how they look.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

T = TypeVar("T")

# Control characters (Cc) but tab and newline; format characters (Cf: bidi controls, zero-width
# spaces and joiners, invisible operators, the soft hyphen); line and paragraph separators (a
# line break to the eye, none to Python); fillers that show as blank; variation selectors and
# tag characters, which show nothing and can carry a hidden message. U+FE0E/U+FE0F are left
# alone: they pick the text or emoji look of the character before them, everyday in text.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
    "|\r(?!\n)"  # a carriage return that ends no line: on a terminal it writes over the line's start
    "|(?<=.)\ufeff"  # a byte order mark anywhere but at the very start
    "|[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
    "\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0d\uffa0\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]",
    re.DOTALL,
)

MARK = re.compile(r"<U\+[0-9A-F]{4,6}>")  # what a revealed character looks like


def _mark(found: re.Match[str]) -> str:
    return f"<U+{ord(found.group()):04X}>"


class Reveal:
    """Shows text with its hidden characters marked, and counts them (`found`) for the warning."""

    def __init__(self) -> None:
        self.found = 0

    def __call__(self, text: str) -> str:
        shown, count = _HIDDEN.subn(_mark, text)
        self.found += count
        return shown

    def tree(self, data: T) -> T:
        """`data` (dataclasses, lists, tuples, dicts of them) with every string in it revealed."""
        return self._tree(data)  # type: ignore[no-any-return]

    def _tree(self, data: Any) -> Any:
        if isinstance(data, str):
            return self(data)
        if dataclasses.is_dataclass(data) and not isinstance(data, type):
            return dataclasses.replace(data, **{f.name: self._tree(getattr(data, f.name))
                                                for f in dataclasses.fields(data) if f.init})
        if isinstance(data, (list, tuple)):
            return type(data)(self._tree(item) for item in data)
        if isinstance(data, dict):
            return {self._tree(key): self._tree(value) for key, value in data.items()}
        return data

    def warning(self, what: str) -> str | None:
        return hidden_warning(self.found, what)


def hidden_warning(found: int, what: str) -> str | None:
    """The line an output starts with when it holds `found` hidden characters, else None."""
    if not found:
        return None
    many = "s" if found != 1 else ""
    return (f"warning: this {what} contains {found} hidden or bidirectional control character{many}, "
            f"shown as <U+XXXX>: the code may not be what it looks like in an editor")


def reveal(text: str) -> str:
    """`text` with every hidden character shown as <U+XXXX>."""
    return Reveal()(text)
