"""Pods by label selector: `kubectl get pods -l SELECTOR -n NAMESPACE -o json`, read into hosts.

An inventory group may be a selector (inventory.PodSelector) instead of a list of hosts. At
run time it becomes the pods that can take an exec now: phase Running, not being deleted,
and the chosen container (or every container) running. Every other pod is left out with its
reason, which the CLI shows before the run. Reading the document is pure (`pods_from_json`);
`resolve_selector` runs kubectl once per selector group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from patchkit.base.errors import HostError
from patchkit.fleet.inventory import Defaults, HostSpec, PodSelector
from patchkit.host.transport import schemes  # noqa: F401 - registers the schemes that read the hosts built here
from patchkit.host.transport.container_errors import Where, failure_from
from patchkit.host.transport.k8s import K8sOptions, kubectl_prefix

GET_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Pod:
    name: str
    reason: str | None = None  # why it is left out; None: it takes an exec


def _settings(selector: PodSelector, defaults: Defaults) -> dict[str, object]:
    """What each pod of the selector gets, flat: the inventory's defaults, then the selector's."""
    return {**defaults.settings(), **selector.host_settings()}


def get_pods_argv(selector: PodSelector, defaults: Defaults) -> list[str]:
    """kubectl's argv listing the selector's pods, with the kubectl options its pods are reached with."""
    given = _settings(selector, defaults)
    options = K8sOptions.model_validate({k: v for k, v in given.items() if k in K8sOptions.model_fields})
    return [*kubectl_prefix(options), "get", "pods", "-l", selector.k8s_selector, "-n", selector.namespace,
            "-o", "json"]


def _container_state(status: dict[str, Any]) -> str | None:
    """None if the container runs, else what it is doing (waiting: CrashLoopBackOff...)."""
    state = status.get("state") or {}
    if "running" in state:
        return None
    for phase in ("waiting", "terminated"):
        if phase in state:
            reason = (state[phase] or {}).get("reason")
            return f"{phase}" + (f": {reason}" if reason else "")
    return "in no known state"


def pod_state(item: dict[str, Any], container: str | None) -> Pod:
    """One item of a pod list: can it take an exec into `container` (None: its default)?"""
    meta = item.get("metadata") or {}
    name = str(meta.get("name", "?"))
    if meta.get("deletionTimestamp"):
        return Pod(name, "terminating (deletionTimestamp set)")
    status = item.get("status") or {}
    phase = status.get("phase", "Unknown")
    if phase != "Running":
        why = status.get("reason") or status.get("message")
        return Pod(name, f"phase {phase}" + (f" ({why})" if why else ""))
    statuses = {str(s.get("name")): s for s in status.get("containerStatuses") or []}
    if container is not None:
        if container not in statuses:
            have = ", ".join(sorted(statuses)) or "none"
            return Pod(name, f"has no container {container} (containers: {have})")
        wanted = [container]
    else:  # kubectl exec picks the default container; all must run for that to be sure
        wanted = sorted(statuses)
    for c in wanted:
        state = _container_state(statuses[c])
        if state is not None:
            return Pod(name, f"container {c} is {state}")
    return Pod(name)


def pods_from_json(document: str | dict[str, Any], container: str | None) -> list[Pod]:
    """The pods of a `kubectl get pods -o json` document (a List, or a single Pod), in its order."""
    doc = json.loads(document) if isinstance(document, str) else document
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")  # noqa: TRY004 - a bad document, as json.loads says
    items = doc.get("items") if doc.get("kind") != "Pod" else [doc]
    if not isinstance(items, list):
        raise ValueError("no `items` list")  # noqa: TRY004
    return [pod_state(item, container) for item in items if isinstance(item, dict)]


def pod_host(selector: PodSelector, defaults: Defaults, pod: str) -> HostSpec:
    """The host of one pod: the inventory's defaults, then the selector's settings."""
    merged = _settings(selector, defaults)
    merged["vars"] = {**defaults.vars, **selector.vars}
    tail = f"/{selector.container}" if selector.container else ""
    merged.update(name=f"{selector.namespace}/{pod}", address=f"k8s://{selector.namespace}/{pod}{tail}")
    return HostSpec.model_validate(merged)


def resolve_selector(group: str, selector: PodSelector, defaults: Defaults) -> tuple[list[HostSpec], list[str]]:
    """The running pods of a selector group as hosts, and a note per pod left out (HostError if
    kubectl cannot list them)."""
    argv = get_pods_argv(selector, defaults)
    where = Where(f"group {group}", f"pods -l {selector.k8s_selector} in namespace {selector.namespace}",
                  os.path.basename(argv[0]))
    if shutil.which(argv[0]) is None:
        raise HostError(f"group {group}: kubectl `{argv[0]}` is not on this machine (not in PATH); install it "
                        "or set `engine:` to its path")
    try:
        done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=GET_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise HostError(f"group {group}: `kubectl get pods` gave no answer within {GET_TIMEOUT_S:g}s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        failure = failure_from(lines, where)
        raise HostError(str(failure) if failure else
                        f"group {group}: kubectl get pods failed (exit {done.returncode}): "
                        + (" ".join(lines[-2:]) or "no message"))
    try:
        pods = pods_from_json(done.stdout, selector.container)
    except ValueError as exc:
        raise HostError(f"group {group}: kubectl get pods printed no pod list ({exc})") from None
    hosts = [pod_host(selector, defaults, p.name) for p in pods if p.reason is None]
    notes = [f"group {group}: pod {selector.namespace}/{p.name} left out: {p.reason}" for p in pods if p.reason]
    if not pods:
        notes.append(f"group {group}: no pod matches -l {selector.k8s_selector} in namespace {selector.namespace}")
    return hosts, notes
