"""FakeAgent: a fake host agent, in memory, for tests that need no host (shipped for authors
of step kinds and extensions: `from patchkit.host.testing import FakeAgent, FakePackage, FakeTransport`).

It answers the ops of patchkit/host/agent/protocol.py that the patch and check steps, the journal
and the lock use, the way the real agent (patchkit/host/remote/) does, over a dict of files
and a dict of journal records: no process, no SSH, no disk. A runner test builds one,
hands it to the runner in a Session, and asserts what is in `files`, `journal` and `calls`
afterwards: milliseconds per run, so the runner's own decisions (what runs after a failure,
the order of a rollback, what a broken journal stops) are tested beside the real tests,
which stay the proof that the real agent does what this fake pretends.

What it does not do: deploy and launch ops (they answer "not in the fake agent"), real
import checks (modules named in `failing_imports` fail theirs, every other one passes) and
real check code (`check_returncodes` maps a check's code to its exit status; default 0).
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from patchkit.host.agent.client import AgentRefused
from patchkit.host.agent.files import mutating_ops
from patchkit.host.agent.protocol import Request
from patchkit.base.errors import HostError

Reply = TypeVar("Reply")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class FakePackage:
    """An installed package as `locate` finds it: its root, version and module files."""

    root: str
    version: str | None
    modules: dict[str, str]  # dotted module name -> its file (a key of FakeAgent.files)


@dataclass
class FakePending:
    """The fake's answer to a request sent: computed at once, read when awaited."""

    op: str
    value: Any = None
    error: HostError | None = None

    async def result(self, reply_wait: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


@dataclass
class FakeTransport:
    name: str = "fake"
    exec_requests: int = 0

    async def close(self) -> None:
        return None


@dataclass
class FakeAgent:
    """A fake of the host agent: the op surface over `files` (path -> bytes) and `journal`
    ((recipe, run_id) -> record JSON). Every request lands in `calls` as (op, args)."""

    files: dict[str, bytes] = field(default_factory=dict)
    packages: dict[str, FakePackage] = field(default_factory=dict)
    journal: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    failing_imports: set[str] = field(default_factory=set)
    check_returncodes: dict[str, int] = field(default_factory=dict)
    fail_journal_write: int | None = None  # the Nth journal write (1-based) fails, as a full disk would
    journal_broken: str | None = None  # why: then every op that changes the host is refused
    info: dict[str, Any] = field(default_factory=lambda: {"python": "/fake/bin/python", "python_version": "3.11.0"})
    warnings: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    on_bytes: Callable[[int], None] | None = None
    journal_writes: int = 0

    # ------------------------------------------------------------ the client's surface

    async def call(self, request: Request[Reply], reply_wait: float | None = 600) -> Reply:
        value: Reply = await (await self.send(request)).result(reply_wait)
        return value

    async def prefetch(self, request: Request[Reply]) -> FakePending:
        """AgentClient.prefetch: a fake answers every request at once, so early is just sent."""
        return await self.send(request)

    async def send(self, request: Request[Reply]) -> FakePending:
        args = dict(request.args)
        self.calls.append((request.op, args))
        handler = getattr(self, f"op_{request.op}", None)
        try:
            if handler is None:
                raise HostError(f"fake: {request.op} failed: not in the fake agent")
            if request.op in mutating_ops() and self.journal_broken:
                raise AgentRefused(f"not done: a journal write of this run failed earlier ({self.journal_broken}), "
                                   "and no change is made without its record")
            return FakePending(request.op, handler(**args))
        except HostError as exc:
            return FakePending(request.op, error=exc)

    async def send_file(self, request: Request[Reply], local: Path, start: int, count: int) -> FakePending:
        return await self.send(request)

    async def started(self, python: str) -> dict[str, Any]:
        return self.info

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------ what tests look at

    def ops(self, *names: str) -> list[tuple[str, dict[str, Any]]]:
        """The requests for these ops, in the order they came."""
        return [(op, args) for op, args in self.calls if op in names]

    def runs(self, recipe: str) -> list[dict[str, Any]]:
        return [record for (name, _), record in sorted(self.journal.items()) if name == recipe]

    # ------------------------------------------------------------ the ops

    def op_hello(self) -> dict[str, Any]:
        return self.info

    def op_end(self) -> dict[str, Any]:
        return {}

    def op_lock(self, state_dir: str, timeout_s: float, owner: str, create: bool = True) -> dict[str, Any]:
        return {"path": posixpath.join(state_dir, "lock"), "state_dir": state_dir}

    def op_journal_write(self, state_dir: str, recipe: str, run_id: str, record: dict[str, Any]) -> dict[str, Any]:
        self.journal_writes += 1
        if self.fail_journal_write == self.journal_writes:
            self.journal_broken = f"{state_dir}/runs/{recipe}/{run_id}.json: [Errno 28] No space left on device"
            raise HostError(f"fake: journal_write failed: OSError: {self.journal_broken}")
        self.journal[(recipe, run_id)] = record
        return {"path": f"{state_dir}/runs/{recipe}/{run_id}.json"}

    def op_journal_list(self, state_dir: str, recipe: str | None = None) -> list[dict[str, Any]]:
        return [record for (name, _), record in sorted(self.journal.items()) if recipe is None or name == recipe]

    def op_journal_prune(self, state_dir: str, recipe: str, drop_run_ids: list[str]) -> dict[str, Any]:
        for run_id in drop_run_ids:
            self.journal.pop((recipe, run_id), None)
        return {"dropped": len(drop_run_ids)}

    def op_locate(self, package: str, modules: list[str], read_first: bool = False) -> dict[str, Any]:
        found = self.packages.get(package)
        if found is None:
            return {"found": False, "sys_path": ["/fake/site-packages"]}
        files = {m: found.modules.get(m) for m in modules}
        out: dict[str, Any] = {"found": True, "root": found.root, "version": found.version,
                               "version_source": posixpath.join(found.root, "_version.py"), "files": files}
        first = next((files[m] for m in modules if files[m]), None)
        if read_first and first:
            out["read"] = dict(self.op_read(first), path=first)
        return out

    def op_read(self, path: str, root: str | None = None) -> dict[str, Any]:  # no symlinks in the fake
        if path not in self.files:
            return {"exists": False, "missing_dirs": self._missing_dirs(path, root)}
        data = self.files[path]
        return {"exists": True, "sha256": sha256(data), "content_b64": base64.b64encode(data).decode(),
                "mode": 0o644, "uid": 0, "gid": 0, "size": len(data)}

    def _missing_dirs(self, path: str, root: str | None) -> list[str]:
        """The folders above path that hold no file (the fake's folders are its files'), deepest first."""
        missing, folder = [], posixpath.dirname(path)
        while folder not in ("/", "") and (root is None or folder.startswith(root.rstrip("/") + "/")) \
                and not any(f.startswith(folder + "/") for f in self.files):
            missing.append(folder)
            folder = posixpath.dirname(folder)
        return missing

    def op_hash(self, paths: list[str], confined: bool = False, root: str | None = None) -> dict[str, str | None]:
        return {p: sha256(self.files[p]) if p in self.files else None for p in paths}

    def _checks(self, path: str, data: bytes, verify_imports: list[str]) -> tuple[list[dict[str, Any]], str | None]:
        checks: list[dict[str, Any]] = []
        try:
            compile(data, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            failure = f"syntax check by /fake/bin/python: {exc.msg} (line {exc.lineno})"
            checks.append({"name": "syntax", "ok": False, "detail": failure})
            return checks, failure
        checks.append({"name": "syntax", "ok": True, "detail": "3.11.0"})
        if verify_imports:
            broken = [m for m in verify_imports if m in self.failing_imports]
            checks.append({"name": "import", "ok": not broken, "detail": ", ".join(verify_imports)})
            if broken:
                return checks, f"import check failed: ImportError: cannot import {broken[0]}"
        return checks, None

    # verify_python / variables: the fake runs no programs (tests/agent/test_verify_python.py does)
    def op_apply_files(self, files: list[dict[str, Any]], verify_imports: list[str],
                       import_timeout_s: float, verify_python: dict[str, Any] | None = None,
                       root: str | None = None,
                       package: str | None = None) -> dict[str, Any]:  # no symlinks in the fake
        """A unit: each file checked against its hash, backed up and written, then the unit's
        checks (read-back, syntax of each, the imports once); any failure puts all back."""
        for spec in files:
            current = sha256(self.files[spec["path"]]) if spec["path"] in self.files else None
            if current != spec["expected_sha256"]:
                raise AgentRefused(f"{spec['path']} changed since it was read (sha256 {(current or 'none')[:12]}, "
                                   f"expected {(spec['expected_sha256'] or 'none')[:12]}); nothing written")
        originals = {spec["path"]: self.files.get(spec["path"]) for spec in files}
        for spec in files:
            if spec["expected_sha256"] is not None:
                self.files[spec["backup_path"]] = self.files[spec["path"]]
        news = {spec["path"]: None if spec["content_b64"] is None else base64.b64decode(spec["content_b64"])
                for spec in files}
        for path, new in news.items():
            if new is None:
                self.files.pop(path, None)
            else:
                self.files[path] = new
        checks, failure = self._unit_checks(news, verify_imports)
        # files added: the folders made for them (the fake has no folders, so none)
        added = [path for path, original in originals.items() if original is None]
        made: dict[str, Any] = {"created_dirs": {path: [] for path in added}} if added else {}
        if failure is None:
            return {"ok": True, "checks": checks,
                    "sha256_after": {p: None if n is None else sha256(n) for p, n in news.items()}, **made}
        for path, original in originals.items():
            if original is None:
                self.files.pop(path, None)
            else:
                self.files[path] = original
        return {"ok": False, "failure": failure, "restored": True, "checks": checks,
                "written": list(news), "restored_files": list(news), **made}

    def _unit_checks(self, news: dict[str, bytes | None],
                     verify_imports: list[str]) -> tuple[list[dict[str, Any]], str | None]:
        checks: list[dict[str, Any]] = [{"name": "read-back", "ok": True, "detail": f"{len(news)} files"}]
        for path, data in news.items():
            if data is None:
                continue
            found, failure = self._checks(path, data, [])
            checks += found
            if failure is not None:
                return checks, failure
        if verify_imports:
            found, failure = self._checks("", b"", verify_imports)
            checks += found[1:]  # the import check only
            if failure is not None:
                return checks, failure
        return checks, None

    def op_verify(self, files: list[dict[str, Any]], verify_imports: list[str], import_timeout_s: float,
                  root: str | None, verify_python: dict[str, Any] | None = None,
                  package: str | None = None) -> dict[str, Any]:
        # no symlinks in the fake: nothing can leave root (tests/agent/test_symlinked_folders.py)
        news: dict[str, bytes | None] = {}
        for spec in files:
            data = self.files.get(spec["path"])
            if (sha256(data) if data is not None else None) != spec["expected_sha256"]:
                raise AgentRefused(f"{spec['path']} changed since it was written")
            news[spec["path"]] = data
        checks, failure = self._unit_checks(news, verify_imports)
        return {"ok": failure is None, "failure": failure, "checks": checks}

    def op_restore(self, path: str, backup_path: str, expected_current: str, original_sha256: str, force: bool,
                   root: str | None, state_dir: str, mode: int | None = None) -> dict[str, Any]:
        backups = posixpath.join(state_dir, "backups")
        if not posixpath.normpath(backup_path).startswith(backups + "/"):  # no symlinks in the fake: by name
            raise AgentRefused(f"backup {backup_path} is outside {backups}: patchkit restores only from its own "
                               "backups; nothing was read or written")
        current = sha256(self.files[path]) if path in self.files else None
        if current == original_sha256:
            return {"ok": True, "already": True}
        if backup_path not in self.files:
            raise AgentRefused(f"backup {backup_path} is missing; cannot restore {path}")
        if current != expected_current and not force:
            raise AgentRefused(f"{path} drifted: it hashes to {(current or 'missing')[:12]}, not "
                               f"{expected_current[:12]} as patchkit left it; refusing to restore "
                               "(--force restores anyway)")
        if sha256(self.files[backup_path]) != original_sha256:
            raise AgentRefused(f"backup {backup_path} is corrupt (hash mismatch); not restoring")
        self.files[path] = self.files[backup_path]
        return {"ok": True, "already": False}

    def op_check(self, code: str, timeout_s: float, variables: dict[str, Any] | None = None,
                 package: str | None = None) -> dict[str, Any]:
        returncode = self.check_returncodes.get(code, 0)
        return {"returncode": returncode, "timed_out": False, "stdout": "",
                "stderr": "" if returncode == 0 else "AssertionError: the fake says no", "seconds": 0.0}
