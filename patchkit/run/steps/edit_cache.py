"""Edit results kept on the control machine, under cache_dir()/edits.

Edits are pure: (edit parameters, file content) -> result. A fleet re-applied daily sees the
same few file versions again and again, so results are kept; a no-op run then needs no
libcst. An entry is bound to what produced it: the file name is a hash of patchkit's version,
the rendered edit and the text edited, and the entry carries a seal (cache.seal: a keyed hash
with this user's key) over those and the result. It is used only when the seal holds and a
changed text still compiles as the edit engine requires (edits.model.compile_error); anything
else, a corrupt or hand-made entry above all, is recomputed. An edit whose parameters or
result hold a secret value is not kept at all: no secret is ever written to the cache.

CPython 3.11's ast and compile keep state shared by all threads (gh-106905: `SystemError:
AST constructor recursion depth mismatch`), and `patchkit test` plans releases in threads:
every edit and every check of an entry runs under EDITING, one at a time in the process.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from patchkit import __version__
from patchkit.base import cache
from patchkit.edits import EditError, EditResult
from patchkit.edits.model import compile_error
from patchkit.recipe.redact import Redactor

if TYPE_CHECKING:
    from patchkit.edits import Edit


class PatchStep(Protocol):
    """What of a patch step's spec (run/steps/patch.py, which imports this) an edit is computed from."""

    @property
    def edit(self) -> Edit: ...

EDITING = threading.Lock()
_VERDICTS = ("changed", "already", "not_found")


def _params(spec: PatchStep) -> str | None:
    """The rendered edit as the key names it; None: not cacheable (it reads a file beside the
    recipe, whose content is not in the key)."""
    if spec.edit.codemod or spec.edit.diff:
        return None
    return json.dumps(spec.edit.model_dump(mode="json"), sort_keys=True)


def _path(params: str, text_sha: str) -> Path:
    digest = hashlib.sha256(json.dumps([__version__, params]).encode()).hexdigest()[:24]
    return cache.cache_dir() / "edits" / f"{digest}-{text_sha}.json"


def _seal_parts(params: str, text_sha: str, verdict: str, message: str, source: str) -> tuple[str, ...]:
    return ("edit", __version__, params, text_sha, verdict, message, source)


def load(spec: PatchStep, text: str) -> EditResult | None:
    """The kept result of this edit of `text`, or None (none kept, or not one to trust)."""
    params = _params(spec)
    if params is None:
        return None
    text_sha = hashlib.sha256(text.encode()).hexdigest()
    data: Any = cache.read_json(_path(params, text_sha))
    if not isinstance(data, dict):
        return None
    verdict, message, mac = data.get("verdict"), data.get("message"), data.get("seal")
    source = data.get("source", "") if verdict == "changed" else ""
    if verdict not in _VERDICTS or not isinstance(message, str) or not isinstance(source, str):
        return None
    if not cache.sealed(mac, *_seal_parts(params, text_sha, verdict, message, source)):
        return None
    if verdict == "changed":
        with EDITING:
            if source == text or compile_error(text, source) is not None:
                return None
        return EditResult("changed", source, message)
    return EditResult(verdict, text, message)


def compute(spec: PatchStep, text: str, redactor: Redactor | None = None) -> EditResult:
    """The edit of `text`, kept for the next run unless a secret value is in it."""
    try:
        with EDITING:
            result = spec.edit.apply(text)
    except EditError as exc:
        return EditResult("not_found", text, str(exc))
    params = _params(spec)
    if params is None or result.refused:  # a refusal is cheap to find again, and fixed soon
        return result
    source = result.source if result.verdict == "changed" else ""
    if redactor and any(redactor.text(part) != part for part in (params, result.message, source)):
        return result  # the cache is a file on disk: a secret value never goes there
    text_sha = hashlib.sha256(text.encode()).hexdigest()
    mac = cache.seal(*_seal_parts(params, text_sha, result.verdict, result.message, source))
    if mac is None:
        return result
    entry: dict[str, str] = {"verdict": result.verdict, "message": result.message, "seal": mac}
    if result.verdict == "changed":
        entry["source"] = source
    cache.write_json_quietly(_path(params, text_sha), entry)
    return result
