"""A release's plans, kept: the same steps on the same files by the same patchkit plan the same.

Key: the hash of patchkit's own source (any change to the code that plans, and the cache is
cold again), the interpreter's version, the steps as the recipe gives them, and the content
of every kept file of the release, and the release's version. Steps whose edit reads files beside the recipe (a
codemod, a `diff: {file: ...}`) are never cached: their inputs are not all in the key.
An entry is sealed with this user's key over its key and its content (cache.seal): one
edited by hand, or moved to another key, is planned again, as is one that is not the shape
written here. Losing the cache only costs time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path

from patchkit.base import cache
from patchkit.recipe.model import Step
from patchkit.recipe.redact import Redactor
from patchkit.commands.releasetest.plan import StepOutcome
from patchkit.run.results import StepResult
from patchkit.run.steps.patch import PatchStep
from patchkit.run.steps.release_reads import expand_in


@functools.cache
def _code_digest() -> str:
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(sys.version.encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cacheable(steps: list[Step]) -> bool:
    return not any((p := PatchStep.of(s)) and (p.edit.codemod or (p.edit.diff and p.edit.diff.file)) for s in steps)


def key_of(steps: list[Step], files: Path, wanted: list[str], version: str) -> str:
    digest = hashlib.sha256(_code_digest().encode())
    digest.update(version.encode() + b"\0")  # the release's own, planned with when its files do not say it
    digest.update(json.dumps([s.model_dump(mode="json", by_alias=True) for s in steps], sort_keys=True).encode())
    for rel in expand_in(files, wanted):
        path = files / rel
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"absent")
    return digest.hexdigest()[:40]


def _path(key: str) -> Path:
    return cache.cache_dir() / "release-plans" / f"{key}.json"


def _seal(key: str, plans: object) -> str | None:
    return cache.seal("release-plans", key, json.dumps(plans, sort_keys=True))


def load(key: str) -> dict[str, StepOutcome] | None:
    data = cache.read_json(_path(key))
    if not isinstance(data, dict) or not isinstance(data.get("plans"), dict):
        return None
    if not cache.sealed(data.get("seal"), "release-plans", key, json.dumps(data["plans"], sort_keys=True)):
        return None
    try:
        return {name: StepOutcome(StepResult.model_validate(o["result"]),
                                  StepResult.model_validate(o["unranged"]) if o.get("unranged") else None)
                for name, o in data["plans"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def store(key: str, outcomes: dict[str, StepOutcome], redactor: Redactor | None = None) -> None:
    plans = {name: {"result": o.result.model_dump(mode="json"),
                    "unranged": o.unranged.model_dump(mode="json") if o.unranged else None}
             for name, o in outcomes.items()}
    if redactor and redactor.value(plans) != plans:
        return  # a diff or message with a secret value in it: never written to disk
    mac = _seal(key, plans)
    if mac is not None:
        cache.write_json_quietly(_path(key), {"plans": plans, "seal": mac})
