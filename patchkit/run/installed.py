"""An installed distribution as its RECORD describes it, and the files that no longer match.

The host agent hashes every file RECORD lists (op `dist_files`, host/remote/installed.py); this
module names what it answers. `audit` explains the differences with the journal, `capture`
turns them into a recipe; neither writes anything on the host.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from patchkit.host.agent.client import DEFAULT_REPLY_WAIT, AgentClient
from patchkit.host.agent.protocol import DIST_FILES, DistFilesArgs
from patchkit.base.errors import HostError

Change = Literal["modified", "missing", "not a regular file"]


class OutsideRow(BaseModel):
    rel: str  # as RECORD writes it
    why: str  # how it leaves the distribution's folder


class ChangedFile(BaseModel):
    rel: str  # as RECORD writes it, relative to the distribution's folder (site-packages)
    path: str
    real: str | None = None  # the path with symlinks resolved
    change: Change
    record_sha256: str  # RECORD's urlsafe base64 digest
    sha256: str | None = None  # hex digest of the file now (modified files; None: another size, not hashed)
    size: int | None = None  # bytes now
    record_size: int | None = None  # bytes RECORD says (None: it says none)


class InstalledDist(BaseModel):
    name: str
    version: str
    location: str  # the folder RECORD's paths are relative to
    checked: int  # files with a hash in RECORD
    unhashed: int = 0
    listed: int = 0  # RECORD rows read (all of them, or those of the files asked for)
    changed: list[ChangedFile] = Field(default_factory=list)
    outside: list[OutsideRow] = Field(default_factory=list)  # rows leaving the folder: skipped, never read
    outside_count: int = 0
    out_of_time: bool = False  # the time budget ran out before every file was hashed
    unchecked: int = 0  # hashed rows not looked at then
    budget_s: float | None = None

    def module_of(self, changed: ChangedFile) -> str | None:
        """`vllm/config/speculative.py` -> `vllm.config.speculative` (None: not a module)."""
        rel = changed.rel.replace("\\", "/")
        if not rel.endswith(".py") or rel.startswith("../"):
            return None
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


async def installed(agent: AgentClient, name: str, only: list[str] | None = None, hash_anyway: list[str] | None = None,
                    budget_s: float | None = None) -> InstalledDist:
    """The distribution `name` (or the one owning the package `name`) on the host. Files of
    `hash_anyway` are hashed even when their size differs from RECORD's; `budget_s` bounds the
    hashing (the agent's default otherwise)."""
    args: DistFilesArgs = {"name": name, "only": only, "hash_anyway": list(hash_anyway or [])}
    if budget_s is not None:
        args["budget_s"] = budget_s
    answer = await agent.call(DIST_FILES(args), reply_wait=DEFAULT_REPLY_WAIT if budget_s is None else budget_s + 120)
    if not answer["found"]:
        python = agent.info.get("python", "the target interpreter")
        raise HostError(f"no installed distribution {name} (nor one that owns a package {name}) "
                        f"for {python}: pick the interpreter with -e python=PATH or the inventory")
    return InstalledDist.model_validate(answer)
