"""`patchkit bake RECIPE --from IMAGE -t TAG`: a patched image, verified as any host is.

1. start a container from IMAGE with no network (`run -d --network none --entrypoint sleep
   IMAGE infinity`: whatever the image's own entrypoint is, the container only waits);
2. plan the recipe there (printed first) and apply it through the container transport,
   with the usual verification; the journal lands in the container's state dir;
3. only if every step succeeded: `commit` the container as TAG, with the image's own
   ENTRYPOINT and CMD put back, so TAG starts as IMAGE did and carries the journal:
   `status` and `rollback` work in containers started from it;
4. remove the container, whatever happened.

A failed plan or step writes no image (exit 1). The engine is podman or docker (its CLI,
e.g. against podman's Docker-compatible socket through DOCKER_HOST).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from patchkit.errors import HostError
from patchkit.inventory import HostSpec
from patchkit.results import RunReport

ENGINE_TIMEOUT_S = 300.0


@dataclass
class BakeSpec:
    image: str
    tag: str
    engine: str = "podman"
    engine_args: list[str] = field(default_factory=list)  # global, before the engine's command
    run_args: list[str] = field(default_factory=list)  # for `run` (e.g. --ulimit ...)
    python: str | None = None
    state_dir: str | None = None


class BakeFailed(HostError):
    """The container could not be started or committed (the message says which)."""


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
        done = self.run("image", "inspect", "--format", "{{json .Config.Entrypoint}}\t{{json .Config.Cmd}}", image)
        entrypoint, _, cmd = done.stdout.strip().partition("\t")
        return json.loads(entrypoint or "null"), json.loads(cmd or "null")


def container_name(run_id: str) -> str:
    return f"patchkit-bake-{run_id.lower().replace(':', '').replace('.', '')[-20:]}"


def changes(entrypoint: object, cmd: object) -> list[str]:
    """`commit --change` instructions that put the image's ENTRYPOINT and CMD back."""
    return ["--change", f"ENTRYPOINT {json.dumps(entrypoint or [])}", "--change", f"CMD {json.dumps(cmd or [])}"]


def bake(spec: BakeSpec, run_id: str, work: Callable[[HostSpec, bool], RunReport],
         say: Callable[[str], None]) -> tuple[RunReport | None, bool]:
    """Bake TAG. `work(host, dry_run)` runs the recipe on the container's host and reports it
    (printed by the caller). The last report and whether TAG was written."""
    engine = Engine(spec)
    entrypoint, cmd = engine.config(spec.image)  # the image exists, and what TAG must keep
    name = container_name(run_id)
    engine.run("run", "-d", "--name", name, "--network", "none", *spec.run_args,
               "--entrypoint", "sleep", spec.image, "infinity")
    try:
        scheme = "docker" if engine.label.startswith("docker") else "podman"
        host = HostSpec.model_validate({"name": "bake", "address": f"{scheme}://{name}", "engine": spec.engine,
                                        "engine_args": list(spec.engine_args), "python": spec.python,
                                        "state_dir": spec.state_dir})
        say(f"bake: container {name} from {spec.image} (no network); the plan:")
        plan = work(host, True)
        if _failed(plan):
            say(f"bake: the plan failed: no image written ({spec.tag})")
            return plan, False
        applied = work(host, False)
        if _failed(applied):
            say(f"bake: a step failed: no image written ({spec.tag})")
            return applied, False
        done = engine.run("commit", *changes(entrypoint, cmd), name, spec.tag, check=False)
        if done.returncode != 0:
            raise BakeFailed(_commit_failed(engine.label, done.stderr))
        say(f"bake: wrote {spec.tag} ({spec.image} + {applied.recipe}, its journal inside: "
            "status and rollback work in containers started from it)")
        return applied, True
    finally:  # `stop -t 0` first: `sleep` as PID 1 ignores SIGTERM, and podman's rm -f waits 10 s for it
        engine.run("stop", "-t", "0", name, check=False)
        engine.run("rm", "-f", name, check=False)


def _commit_failed(engine: str, stderr: str) -> str:
    why = " ".join(stderr.strip().splitlines()[-2:]) or "no message"
    if "decode(): eof" in stderr.lower():  # podman <= 4.x behind DOCKER_HOST: /commit wants a JSON body
        return (f"bake: `{engine} commit` failed: {why}: the Docker API answering (podman's system service) "
                "refuses a commit without a request body, which the docker CLI does not send (podman issue "
                "#26261); bake with --engine podman on that machine. No image written")
    return f"bake: `{engine} commit` failed: {why}. No image written"


def _failed(report: RunReport) -> bool:
    return any(h.status == "failed" for h in report.hosts.values())

