"""`patchkit bake RECIPE --from IMAGE -t TAG`: a patched image, verified as any host is.

1. remove the bake containers left by bakes whose process is gone (a `kill -9`): each bake's
   container carries the label `patchkit.commands.bake.owner` naming this machine, its pid and that
   process's start time;
2. start a container from IMAGE with no network (`run -d --rm --network none --entrypoint sleep
   -- IMAGE SECONDS`: whatever the image's own entrypoint is, the container only waits, and
   for no longer than the bake's timeout: one left behind ends and removes itself);
3. plan the recipe there (printed first) and apply it through the container transport,
   with the usual verification; the journal lands in the container's state dir;
4. only if every step succeeded and at least one was not skipped (or `--allow-skipped`):
   `commit` the container as TAG, with the image's own ENTRYPOINT and CMD put back, so TAG
   starts as IMAGE did and carries the journal: `status` and `rollback` work in containers
   started from it;
5. remove the container, whatever happened (a `run` that failed included: it may leave a
   `Created` container behind).

IMAGE and TAG are image references, checked before any engine runs (one starting with `-`
would be read as an option), and every positional argument follows `--`. A failed plan or
step, or a recipe whose every step was skipped, writes no image (exit 1). The engine is
podman or docker (its CLI, e.g. against podman's Docker-compatible socket through DOCKER_HOST).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from patchkit.base.errors import HostError, UsageError
from patchkit.fleet.inventory import HostSpec
from patchkit.host.transport import schemes  # noqa: F401 - registers the schemes that read the host built here
from patchkit.run.results import RunReport

ENGINE_TIMEOUT_S = 300.0
BAKE_TIMEOUT_S = 3600  # how long a bake's container lives at most (`sleep`), unless --timeout says
OWNER_LABEL = "patchkit.commands.bake.owner"

# An image reference as podman and docker parse one (distribution's reference grammar):
# [DOMAIN[:PORT]/]COMPONENT[/COMPONENT...][:TAG][@DIGEST], components lower-case.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"{_NAME}(?:{_TAG})?(?:{_DIGEST})?")
TAG_REFERENCE = re.compile(rf"{_NAME}(?:{_TAG})?")  # what commit names: no digest


@dataclass
class BakeSpec:
    image: str
    tag: str
    engine: str = "podman"
    engine_args: list[str] = field(default_factory=list)  # global, before the engine's command
    run_args: list[str] = field(default_factory=list)  # for `run` (e.g. --ulimit ...)
    python: str | None = None
    state_dir: str | None = None
    timeout_s: int = BAKE_TIMEOUT_S  # the container's lifetime
    allow_skipped: bool = False  # write TAG even when every step was skipped


class BakeFailed(HostError):
    """The container could not be started or committed (the message says which)."""


def check_references(spec: BakeSpec) -> None:
    """IMAGE and TAG as image references (UsageError, exit 2): `--tag=--change=ENV X=1` must
    never reach the engine as an option of `commit`."""
    for flag, value, grammar, form in (("--from", spec.image, IMAGE_REFERENCE, "NAME[:TAG][@DIGEST]"),
                                       ("-t/--tag", spec.tag, TAG_REFERENCE, "NAME[:TAG]")):
        if value.startswith("-"):
            raise UsageError(f"bake {flag} {value!r}: an image reference cannot start with '-' "
                             "(it would reach the engine as an option)")
        if len(value) > 255 or not grammar.fullmatch(value):
            raise UsageError(f"bake {flag} {value!r}: not an image reference ({form}, lower-case name "
                             "components, e.g. registry.local/vllm:0.16.0-kimi)")
    if spec.timeout_s < 1:
        raise UsageError(f"bake --timeout {spec.timeout_s}: want a whole number of seconds >= 1")


class Engine:
    """The engine's CLI, run with its global arguments; failures as BakeFailed."""

    def __init__(self, spec: BakeSpec) -> None:
        self.spec = spec
        self.label = os.path.basename(spec.engine)
        if shutil.which(spec.engine) is None:
            raise BakeFailed(f"bake: the container engine `{spec.engine}` is not on this machine (not in PATH)")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [self.spec.engine, *self.spec.engine_args, *args]
        try:
            done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=ENGINE_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BakeFailed(f"bake: `{self.label} {args[0]}` did not finish within {ENGINE_TIMEOUT_S:g}s") from None
        if check and done.returncode != 0:
            why = " ".join(done.stderr.strip().splitlines()[-2:]) or f"exit {done.returncode}"
            raise BakeFailed(f"bake: `{self.label} {args[0]}` failed: {why}")
        return done

    def config(self, image: str) -> tuple[object, object]:
        """The image's ENTRYPOINT and CMD (JSON values; None when unset)."""
        done = self.run("image", "inspect", "--format", "{{json .Config.Entrypoint}}\t{{json .Config.Cmd}}",
                        "--", image)
        entrypoint, _, cmd = done.stdout.strip().partition("\t")
        return json.loads(entrypoint or "null"), json.loads(cmd or "null")

    def remove(self, *names: str) -> None:
        """At once (`stop -t 0` first: `sleep` as PID 1 ignores SIGTERM, and podman's rm -f
        waits 10 s for it); `--rm` may have removed them already."""
        if names:
            self.run("stop", "-t", "0", "--", *names, check=False)
            self.run("rm", "-f", "--", *names, check=False)


def container_name(run_id: str) -> str:
    return f"patchkit-bake-{run_id.lower().replace(':', '').replace('.', '')[-20:]}"


def changes(entrypoint: object, cmd: object) -> list[str]:
    """`commit --change` instructions that put the image's ENTRYPOINT and CMD back."""
    return ["--change", f"ENTRYPOINT {json.dumps(entrypoint or [])}", "--change", f"CMD {json.dumps(cmd or [])}"]


# ------------------------------------------------------------------ whose container is it


def _proc_stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command's name: [state, ppid, ...]; [] where there is none."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (stat field 22): with the pid, it
    names one process even after the pid is reused. "" where there is no /proc."""
    fields = _proc_stat(pid)
    return fields[19] if len(fields) > 19 else ""


def owner_label() -> str:
    """`HOST PID START` of this bake process."""
    return f"{socket.gethostname()} {os.getpid()} {_start_time(os.getpid())}"


def owner_gone(label: str) -> bool:
    """The bake that labelled a container is no longer running on this machine (no such pid,
    a zombie, or another process under its pid). A label of another machine (an engine
    shared through DOCKER_HOST) is never judged gone: its container ends with its `sleep`."""
    host, _, rest = label.partition(" ")
    pid_text, _, start = rest.partition(" ")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, someone else's
    fields = _proc_stat(pid)
    if not fields:
        return False  # no /proc to tell: alive
    return fields[0] in ("Z", "X") or (bool(start) and len(fields) > 19 and fields[19] != start)


def stale_containers(engine: Engine) -> list[str]:
    """The bake containers on this engine whose bake process is gone."""
    listed = engine.run("ps", "-a", "--filter", f"label={OWNER_LABEL}", "--format", "{{.Names}}", check=False)
    names = [n for n in listed.stdout.split() if n] if listed.returncode == 0 else []
    if not names:
        return []
    labels = engine.run("container", "inspect", "--format", f'{{{{index .Config.Labels "{OWNER_LABEL}"}}}}',
                        "--", *names, check=False)
    if labels.returncode != 0:  # one vanished meanwhile: ask one by one
        found = [engine.run("container", "inspect", "--format", f'{{{{index .Config.Labels "{OWNER_LABEL}"}}}}',
                            "--", n, check=False) for n in names]
        pairs = [(n, d.stdout.strip()) for n, d in zip(names, found) if d.returncode == 0]
    else:
        pairs = list(zip(names, labels.stdout.splitlines()))
    return [name for name, label in pairs if owner_gone(label.strip())]


# ------------------------------------------------------------------ the bake


def bake(spec: BakeSpec, run_id: str, work: Callable[[HostSpec, bool], RunReport],
         say: Callable[[str], None]) -> tuple[RunReport | None, bool]:
    """Bake TAG. `work(host, dry_run)` runs the recipe on the container's host and reports it
    (printed by the caller). The last report and whether TAG was written."""
    check_references(spec)
    engine = Engine(spec)
    stale = stale_containers(engine)
    if stale:
        engine.remove(*stale)
        say(f"bake: removed {len(stale)} container(s) of earlier bakes whose process is gone: {', '.join(stale)}")
    entrypoint, cmd = engine.config(spec.image)  # the image exists, and what TAG must keep
    name = container_name(run_id)
    try:
        engine.run("run", "-d", "--rm", "--name", name, "--network", "none", "--label", f"{OWNER_LABEL}={owner_label()}",
                   *spec.run_args, "--entrypoint", "sleep", "--", spec.image, str(spec.timeout_s))
        scheme = "docker" if engine.label.startswith("docker") else "podman"
        host = HostSpec.model_validate({"name": "bake", "address": f"{scheme}://{name}", "engine": spec.engine,
                                        "engine_args": list(spec.engine_args), "python": spec.python,
                                        "state_dir": spec.state_dir})
        say(f"bake: container {name} from {spec.image} (no network, at most {spec.timeout_s}s); the plan:")
        plan = work(host, True)
        if _failed(plan):
            say(f"bake: the plan failed: no image written ({spec.tag})")
            return plan, False
        applied = work(host, False)
        if _failed(applied):
            say(f"bake: a step failed: no image written ({spec.tag})")
            return applied, False
        skipped = _all_skipped(applied)
        if skipped and not spec.allow_skipped:
            say(f"bake: every step was skipped, so {spec.image} would be written unchanged: no image written "
                f"({spec.tag}): {skipped}; --allow-skipped writes it anyway")
            return applied, False
        done = engine.run("commit", *changes(entrypoint, cmd), "--", name, spec.tag, check=False)
        if done.returncode != 0:
            raise BakeFailed(_commit_failed(engine.label, done.stderr))
        say(f"bake: wrote {spec.tag} ({spec.image} + {applied.recipe}, its journal inside: "
            "status and rollback work in containers started from it)")
        return applied, True
    finally:
        engine.remove(name)


def _commit_failed(engine: str, stderr: str) -> str:
    why = " ".join(stderr.strip().splitlines()[-2:]) or "no message"
    if "decode(): eof" in stderr.lower():  # podman <= 4.x behind DOCKER_HOST: /commit wants a JSON body
        return (f"bake: `{engine} commit` failed: {why}: the Docker API answering (podman's system service) "
                "refuses a commit without a request body, which the docker CLI does not send (podman issue "
                "#26261); bake with --engine podman on that machine. No image written")
    return f"bake: `{engine} commit` failed: {why}. No image written"


def _failed(report: RunReport) -> bool:
    return any(h.status == "failed" for h in report.hosts.values())


def _all_skipped(report: RunReport) -> str:
    """`STEP: why; ...` when every step of every host was skipped, else ""."""
    steps = [s for h in report.hosts.values() for s in h.steps]
    if not steps or any(s.status != "skipped" for s in steps):
        return ""
    return "; ".join(f"{s.name}: {s.message or 'skipped'}" for s in steps)
