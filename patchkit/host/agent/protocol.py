"""The host agent's ops as the control side sees them: each op's name, request and reply.

The host files (host/remote/) declare the ops and answer them; they are stdlib-only Python 3.8
and never import this (nor does this import them). Here each op is one `Op` constant typed
by its request (the op's keyword arguments, a TypedDict) and its reply (what its function
returns, as JSON). Calling the `Op` with the request's fields makes a `Request`; the client's
`call`, `send` and `send_file` take it and give back the reply with its type, so a call site
that sends a wrong key or reads a reply's key that is not there is a type error (mypy), not a
KeyError on a host.

An op's own time limits are fields of its request (`timeout_s`, `import_timeout_s`, the
`http` op's `timeout`); how long the control side waits for the reply is the client's
`reply_wait`, never a request field.

A reply is a TypedDict: no copy and no validation on the way (the agent is ours, and its
replies are JSON by construction); the records kept in the journal are pydantic models
(patchkit/run/results.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, Mapping, NotRequired, TypedDict, TypeVar, cast

Args = TypeVar("Args")
Reply = TypeVar("Reply")


@dataclass(frozen=True)
class Request(Generic[Reply]):
    """One request, ready to send: `READ({"path": p})`; the client gives back a `Reply`."""

    op: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Op(Generic[Args, Reply]):
    """One op of the host agent: its name on the wire, typed by its request and its reply.
    Called with the request's fields, it makes the request (checked against `Args`)."""

    name: str

    def __post_init__(self) -> None:
        if OPS.setdefault(self.name, self) is not self:
            raise RuntimeError(f"two ops are named {self.name!r}")

    def __call__(self, args: Args) -> Request[Reply]:
        return Request(self.name, cast(Mapping[str, Any], args))


# Every op, by name: the core's and extensions' below, and a step kind's own (typed in its module).
OPS: dict[str, Op[Any, Any]] = {}


class NoArgs(TypedDict):
    pass


# ---------------------------------------------------------------- core: start, files, checks

class HelloReply(TypedDict):
    python: str
    python_version: str
    pid: int
    uid: int
    home: str
    hostname: str


class LoadArgs(TypedDict):
    name: str
    source: str


class LoadReply(TypedDict):
    loaded: str


class ReadArgs(TypedDict):
    path: str
    root: NotRequired[str]  # the package folder the path must stay inside (no symlinked folder out of it)


class ReadReply(TypedDict):
    exists: bool
    sha256: NotRequired[str]  # these only when it exists
    content_b64: NotRequired[str]
    mode: NotRequired[int]
    uid: NotRequired[int]
    gid: NotRequired[int]
    size: NotRequired[int]
    symlink_to: NotRequired[str]  # the file is a symlink to this
    missing_dirs: NotRequired[list[str]]  # only when it does not exist: the folders a write would make, deepest first
    path: NotRequired[str]  # in locate's `read` only: the file it read


class LocateArgs(TypedDict):
    package: str
    modules: list[str]
    read_first: NotRequired[bool]


class LocateReply(TypedDict):
    found: bool
    sys_path: NotRequired[list[str]]  # when not found: where the interpreter looked
    root: NotRequired[str]
    version: NotRequired[str | None]
    version_source: NotRequired[str | None]
    files: NotRequired[dict[str, str | None]]  # module -> its file
    not_source: NotRequired[dict[str, str]]  # module -> what the target loads it from, when that is no .py file
    suggest: NotRequired[dict[str, list[str]]]  # when no module is there: modules of the package named alike
    read: NotRequired[ReadReply]  # read_first: the first module file that exists


class HashArgs(TypedDict):
    paths: list[str]
    confined: NotRequired[bool]  # the files of a journaled change: each refused if it left `root` (RestoreArgs)
    root: NotRequired[str | None]


HashReply = dict[str, str | None]  # path as asked -> its sha256, None if it is no file


class CheckResult(TypedDict):
    name: str
    ok: bool
    detail: str


class VerifyProgram(TypedDict):
    """A patch step's `verify: python`: run after the import check (host: check_program)."""

    code: str
    variables: dict[str, Any]  # the recipe's variables, as JSON in PATCHKIT_VARS
    timeout_s: float


class FileToVerify(TypedDict):
    path: str
    expected_sha256: str | None  # what the file must hold; None: it must be absent (the unit removed it)


class VerifyArgs(TypedDict):
    files: list[FileToVerify]  # a unit's files, verified as op_apply_files verifies them after a write
    verify_imports: list[str]
    import_timeout_s: float
    root: str | None  # the folder the unit's apply was confined to (StepResult.root; None: an older record)
    verify_python: NotRequired[VerifyProgram | None]
    package: NotRequired[str | None]  # the package root is; the import check holds the target to both


class VerifyPassed(TypedDict):
    ok: Literal[True]
    failure: None
    checks: list[CheckResult]


class VerifyFailed(TypedDict):
    ok: Literal[False]
    failure: str
    checks: list[CheckResult]


VerifyReply = VerifyPassed | VerifyFailed


class RestoreArgs(TypedDict):
    path: str
    backup_path: str
    expected_current: str | None
    original_sha256: str | None
    force: bool  # over drift only: never over root or state_dir
    root: str | None  # the folder the change was confined to (a package folder, a deploy's dest; None: unknown)
    state_dir: str  # the journal's: the backup must be inside its backups/, never through a symlink
    mode: NotRequired[int | None]  # the original's permission bits (a deploy's files)


class RestoreReply(TypedDict):
    ok: bool
    already: bool  # the file was the original already: nothing written


class FileToApply(TypedDict):
    path: str
    expected_sha256: str | None  # None: the diff adds the file (it must not exist)
    content_b64: str | None  # None: the diff deletes the file
    backup_path: str


class ApplyFilesArgs(TypedDict):
    files: list[FileToApply]
    verify_imports: list[str]
    import_timeout_s: float
    verify_python: NotRequired[VerifyProgram | None]
    root: NotRequired[str | None]  # the package folder every path must stay inside
    package: NotRequired[str | None]  # the package root is; the import check holds the target to both


class ApplyFilesPassed(TypedDict):
    ok: Literal[True]
    checks: list[CheckResult]
    sha256_after: dict[str, str | None]  # path as sent -> what landed (None: removed)
    created_dirs: NotRequired[dict[str, list[str]]]  # path as sent of a file added -> folders made for it


class ApplyFilesFailed(TypedDict):
    ok: Literal[False]
    checks: list[CheckResult]
    failure: str
    restored: bool  # is every file written back as it was?
    written: list[str]  # paths (as sent) this run changed before the failure, in order
    restored_files: list[str]  # those of them put back
    created_dirs: NotRequired[dict[str, list[str]]]  # as ApplyFilesPassed's: those still there


ApplyFilesReply = ApplyFilesPassed | ApplyFilesFailed


class DistFilesArgs(TypedDict):
    name: str  # a distribution, or the import name of a package one owns
    only: list[str] | None  # just these files (as the host has them); None: every file RECORD lists
    hash_anyway: NotRequired[list[str]]  # files hashed even when their size differs from RECORD's (ours)
    budget_s: NotRequired[float]  # hashing stops after this long (out_of_time)


class ChangedRecordFile(TypedDict):
    rel: str
    path: str
    real: NotRequired[str]
    change: Literal["modified", "missing", "not a regular file"]
    record_sha256: str
    sha256: NotRequired[str]  # absent for a modified file: its size differs from RECORD's, not hashed
    size: NotRequired[int]  # the file's now
    record_size: NotRequired[int | None]  # RECORD's (None: RECORD gives none)


class OutsideRow(TypedDict):
    rel: str  # as RECORD writes it
    why: str  # how it leaves the distribution's folder


class DistFilesReply(TypedDict):
    found: bool
    sys_path: NotRequired[list[str]]  # when not found
    name: NotRequired[str]
    version: NotRequired[str]
    location: NotRequired[str]
    checked: NotRequired[int]
    unhashed: NotRequired[int]
    listed: NotRequired[int]
    changed: NotRequired[list[ChangedRecordFile]]
    outside: NotRequired[list[OutsideRow]]  # rows skipped, never opened (the first OUTSIDE_LISTED)
    outside_count: NotRequired[int]
    out_of_time: NotRequired[bool]  # the budget ran out: `unchecked` hashed rows were not looked at
    unchecked: NotRequired[int]
    budget_s: NotRequired[float]


class CheckArgs(TypedDict):
    code: str
    timeout_s: float
    variables: NotRequired[dict[str, Any]]  # the recipe's variables, as JSON in PATCHKIT_VARS
    package: NotRequired[str | None]  # what it checks: read fresh by it, never held by the warm parent


class PythonRun(TypedDict):
    returncode: int | None  # None: timed out
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float


# ---------------------------------------------------------------- core: journal and lock

class LockArgs(TypedDict):
    state_dir: str
    timeout_s: float
    owner: str
    # False for a run that only reads (plan, status, history): nothing is made on the host; a
    # state dir that is not there is no lock to take, and one that is there is locked shared
    create: NotRequired[bool]


class LockReply(TypedDict):
    path: str | None  # None: a reading run found no state dir (or no lock file) and took no lock
    state_dir: str  # absolute, as the host resolved it


class JournalWriteArgs(TypedDict):
    state_dir: str
    recipe: str
    run_id: str
    record: dict[str, Any]  # a RunRecord as JSON


class JournalWriteReply(TypedDict):
    path: str


class JournalListArgs(TypedDict):
    state_dir: str
    recipe: str | None  # None: every recipe's


JournalListReply = list[dict[str, Any]]  # RunRecords as JSON, unvalidated (the journal reads them)


class JournalPruneArgs(TypedDict):
    state_dir: str
    recipe: str
    drop_run_ids: list[str]


class JournalPruneReply(TypedDict):
    dropped: int


# ---------------------------------------------------------------- transfer (deploy)

class ManifestArgs(TypedDict):
    dest: str
    cache_file: str
    verify_all: NotRequired[bool]


class RemoteFile(TypedDict):
    size: int
    sha256: str
    mode: int


class ManifestReply(TypedDict):
    exists: bool
    is_dir: bool
    files: dict[str, RemoteFile]  # relative path -> what is there
    parts: dict[str, int]  # relative path -> size of its unfinished part file
    dest: str  # absolute


class PartInfoArgs(TypedDict):
    dest: str
    rel: str
    prefix_len: NotRequired[int | None]


class PartInfoReply(TypedDict):
    size: int
    sha256: str | None


class ReceiveFileArgs(TypedDict):
    dest: str
    rel: str
    offset: int
    length: int  # bytes that follow the request on the agent's stdin
    expected_sha256: str
    mode: int
    backup_path: str
    cache_file: str


class ReceiveFileReply(TypedDict):
    path: str
    sha256: str
    sha256_before: str | None  # None: there was no file
    backup: str | None
    mode_before: int | None
    created_dirs: list[str]  # deepest first


class RemoveFileArgs(TypedDict):
    path: str
    expected_sha256: str
    root: str | None  # the folder the change was confined to, as for RestoreArgs
    force: NotRequired[bool]
    remove_dirs: NotRequired[list[str]]


class RemoveFileReply(TypedDict):
    removed: bool
    already: bool


# ---------------------------------------------------------------- checkpoint

class ReadCheckpointArgs(TypedDict):
    path: str


CheckpointView = dict[str, Any]  # patchkit/host/checkpoint/reader.py describes it


# ---------------------------------------------------------------- processes (launch)

class ServerRecordReply(TypedDict):
    """A server the agent started, as its record on the host holds it (LaunchServer in results.py)."""

    name: str
    pid: int
    proc_start: int | None
    argv: list[str]  # as shown: secret arguments redacted
    env_names: list[str]
    cwd: str | None
    log: str
    command_hash: str
    salt: str
    started: float
    run_id: NotRequired[str | None]


class LaunchStartArgs(TypedDict):
    state_dir: str
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    log_path: str
    command_hash: str
    shown_argv: list[str]
    salt: str
    run_id: NotRequired[str]  # the run starting it: what changed after it is in later runs


class PatchedFile(TypedDict):
    package: str
    file: str  # a file a patch step wrote (or found in place)
    root: NotRequired[str | None]  # the package folder it was located in (None: the agent locates it again)


class LaunchResolvesArgs(TypedDict):
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    files: list[PatchedFile]
    timeout_s: NotRequired[float]


class OtherCopy(TypedDict):
    module: str
    imports: str  # what the server would import for module
    wrote: str  # what patchkit wrote for it


class LaunchResolvesReply(TypedDict):
    python: str  # the interpreter the server runs (judged from argv)
    other: list[OtherCopy]  # files the server would import from another copy
    error: str | None  # the check could not run: why


class HttpReply(TypedDict):
    status: int | None  # None: no answer (error says why)
    seconds: float
    body: NotRequired[str]
    error: NotRequired[str]


class LaunchInspectArgs(TypedDict):
    state_dir: str
    name: str
    url: NotRequired[str | None]
    request_timeout: NotRequired[float]


class LaunchInspectReply(TypedDict):
    record: dict[str, Any] | None  # the server's record (older ones may hold more keys)
    running: bool
    exit: str | None
    health: HttpReply | None


class LaunchStopArgs(TypedDict):
    state_dir: str
    name: str
    timeout_s: NotRequired[float]


class LaunchStopReply(TypedDict):
    stopped: bool
    how: str
    record: NotRequired[dict[str, Any]]


class HttpArgs(TypedDict):
    method: str
    url: str
    body: NotRequired[Any]  # sent as JSON
    timeout: NotRequired[float]  # the request's own, on the host (default 30 s); not the reply's wait


class EndReply(TypedDict):
    pass


class HttpRequest(TypedDict):
    method: str
    url: str
    body: NotRequired[Any]


class HttpBatchArgs(TypedDict):
    requests: list[HttpRequest]
    timeout: NotRequired[float]  # each request's own, on the host (default 300 s)


class HttpBatchReply(TypedDict):
    results: list[HttpReply]
    seconds: float


class LogTailArgs(TypedDict):
    path: str
    lines: NotRequired[int]


class LogTailReply(TypedDict):
    tail: str
    errors: NotRequired[list[str]]


# ---------------------------------------------------------------- the ops

HELLO: Op[NoArgs, HelloReply] = Op("hello")
END: Op[NoArgs, EndReply] = Op("end")  # the agent's last request: it exits once it has answered
LOAD: Op[LoadArgs, LoadReply] = Op("load")
LOCATE: Op[LocateArgs, LocateReply] = Op("locate")
READ: Op[ReadArgs, ReadReply] = Op("read")
HASH: Op[HashArgs, HashReply] = Op("hash")
VERIFY: Op[VerifyArgs, VerifyReply] = Op("verify")
RESTORE: Op[RestoreArgs, RestoreReply] = Op("restore")
APPLY_FILES: Op[ApplyFilesArgs, ApplyFilesReply] = Op("apply_files")
DIST_FILES: Op[DistFilesArgs, DistFilesReply] = Op("dist_files")
CHECK: Op[CheckArgs, PythonRun] = Op("check")
LOCK: Op[LockArgs, LockReply] = Op("lock")
JOURNAL_WRITE: Op[JournalWriteArgs, JournalWriteReply] = Op("journal_write")
JOURNAL_LIST: Op[JournalListArgs, JournalListReply] = Op("journal_list")
JOURNAL_PRUNE: Op[JournalPruneArgs, JournalPruneReply] = Op("journal_prune")
MANIFEST: Op[ManifestArgs, ManifestReply] = Op("manifest")
PART_INFO: Op[PartInfoArgs, PartInfoReply] = Op("part_info")
RECEIVE_FILE: Op[ReceiveFileArgs, ReceiveFileReply] = Op("receive_file")  # streaming: bytes follow
REMOVE_FILE: Op[RemoveFileArgs, RemoveFileReply] = Op("remove_file")
READ_CHECKPOINT: Op[ReadCheckpointArgs, CheckpointView] = Op("read_checkpoint")
LAUNCH_START: Op[LaunchStartArgs, ServerRecordReply] = Op("launch_start")
LAUNCH_INSPECT: Op[LaunchInspectArgs, LaunchInspectReply] = Op("launch_inspect")
LAUNCH_RESOLVES: Op[LaunchResolvesArgs, LaunchResolvesReply] = Op("launch_resolves")
LAUNCH_STOP: Op[LaunchStopArgs, LaunchStopReply] = Op("launch_stop")
HTTP: Op[HttpArgs, HttpReply] = Op("http")
HTTP_BATCH: Op[HttpBatchArgs, HttpBatchReply] = Op("http_batch")
LOG_TAIL: Op[LogTailArgs, LogTailReply] = Op("log_tail")
