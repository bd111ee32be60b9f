"""A Python file's bytes as text and back, the way the interpreter reads them.

Python decodes a source file by its PEP 263 declaration (`# -*- coding: latin-1 -*-` on one
of its first two lines), else as UTF-8; a UTF-8 byte order mark says UTF-8 too. Edits work
on text, so a file is decoded as Python would, and the new text is written in the encoding
it declares itself: UTF-8 bytes in a latin-1 file would make the interpreter read 'naÃ¯ve'
where the edit wrote 'naïve'. A character that encoding cannot hold refuses the edit.

A byte order mark stays in the text (U+FEFF): the edits keep it in front of their result.
"""

from __future__ import annotations

import io
import re
import tokenize

from patchkit.edits.model import BOM, EditError

# PEP 263's pattern, to name the declaration as the file writes it (tokenize decides the codec)
_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)
_BLANK = re.compile(r"^[ \t\f]*(?:[#\r]|$)", re.ASCII)


def _head(text: str) -> str:
    """The first two lines, where a declaration may be (lines end at \\n, as Python reads them)."""
    first = text.find("\n")
    second = text.find("\n", first + 1) if first >= 0 else -1
    return text if second < 0 else text[:second + 1]


def _head_bytes(data: bytes) -> bytes:
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first >= 0 else -1
    return data if second < 0 else data[:second + 1]


def _codec(head: bytes) -> str:
    """The codec Python reads a file with, from its first two lines ('utf-8-sig': a BOM)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(head).readline)
    except SyntaxError as exc:
        if str(exc.msg).startswith("invalid or missing"):
            return "utf-8"  # no declaration and a first line that is not UTF-8: decoding names the byte
        if str(exc.msg).startswith("encoding problem"):
            raise EditError("the file starts with a UTF-8 byte order mark but declares another encoding") from None
        raise EditError(f"the file's encoding declaration is not one Python reads ({exc.msg})") from None
    return encoding


def _declared(text: str) -> str | None:
    """The encoding as the file's declaration names it (`latin-1`), None without one."""
    for line in _head(text).split("\n")[:2]:
        found = _COOKIE.match(line.lstrip(BOM))
        if found:
            return found.group(1)
        if not _BLANK.match(line.lstrip(BOM)):
            return None  # the second line declares only after a comment or blank line
    return None


def decode_source(data: bytes) -> str:
    """A file's text as Python reads it; a BOM is kept as U+FEFF. EditError: it cannot be read."""
    codec = _codec(_head_bytes(data))
    try:
        return data.decode("utf-8" if codec == "utf-8-sig" else codec)
    except UnicodeDecodeError as exc:
        name = _declared(_head_bytes(data).decode("latin-1")) or "UTF-8"
        raise EditError(f"the file is not {name} text (byte {data[exc.start]:#04x} at offset {exc.start})") from None


def encode_source(text: str) -> bytes:
    """The bytes of a Python file's text, in the encoding the text itself declares (an edit may
    change the declaration: the interpreter reads what the new file says). EditError naming the
    encoding, the character and its line when the encoding cannot hold it."""
    codec = _codec(_head(text).encode("utf-8", "surrogatepass"))
    try:
        return text.encode("utf-8" if codec == "utf-8-sig" else codec)
    except UnicodeEncodeError as exc:
        char = text[exc.start]
        line = text.count("\n", 0, exc.start) + 1
        name = _declared(text)
        where = f"{name}, the encoding the file declares" if name else "UTF-8, Python's when a file declares none"
        raise EditError(f"{char!r} (U+{ord(char):04X}, line {line}) cannot be written in {where}; "
                        "nothing changed") from None
