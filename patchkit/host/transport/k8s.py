"""The `k8s` scheme: `k8s://NAMESPACE/POD[/CONTAINER]`, a pod's container reached by
`kubectl exec -i` (one exec per run, nothing installed in the pod); kubectl exec has no user:

    kubectl [--kubeconfig F] [--context C] [ENGINE_ARGS] exec -i -n NS POD [-c CONTAINER] -- ...

Pods found by a label selector (an inventory group) are listed by kubectl.py with the same
options.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from patchkit.fleet.inventory import K8S_NAME
from patchkit.host.transport.engine import EngineOptions, EngineScheme, EngineTarget

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec


class K8sOptions(EngineOptions):
    """Kubernetes pods."""

    engine: str | None = Field(default=None, description=(
        "The kubectl binary: a name looked up in PATH, or a path; default `kubectl`."))
    kubeconfig: str | None = Field(default=None, description=(
        "kubectl's `--kubeconfig` (`~` is expanded); default: kubectl's own (KUBECONFIG, ~/.kube/config)."))
    context: str | None = Field(default=None, description="kubectl's `--context`; default: the kubeconfig's current one.")
    engine_args: list[str] = Field(default_factory=list, description=(
        "Options kubectl takes before `exec` (after `--kubeconfig` and `--context`), one word an item, "
        "e.g. `[--request-timeout, 30s]`."))


def kubectl_prefix(options: K8sOptions) -> tuple[str, ...]:
    """kubectl with its global options: the config flags first, then `engine_args`."""
    argv = [options.engine or "kubectl"]
    if options.kubeconfig:
        argv += ["--kubeconfig", os.path.expanduser(options.kubeconfig)]
    if options.context:
        argv += ["--context", options.context]
    return (*argv, *options.engine_args)


@dataclass(frozen=True)
class PodAddress:
    """`k8s://NAMESPACE/POD[/CONTAINER]`, read."""

    namespace: str
    pod: str
    container: str | None = None  # the container in the pod (-c), None: the pod's default

    def __str__(self) -> str:
        tail = f"/{self.container}" if self.container else ""
        return f"k8s://{self.namespace}/{self.pod}{tail}"


def parse_pod_address(rest: str) -> PodAddress:
    """The pod `k8s://REST` names; ValueError (one line, naming the form wanted)."""
    address = f"k8s://{rest}"
    parts = rest.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"address {address!r}: want k8s://NAMESPACE/POD or k8s://NAMESPACE/POD/CONTAINER")
    for what, part in zip(("namespace", "pod", "container"), parts):
        if not K8S_NAME.fullmatch(part):
            raise ValueError(f"address {address!r}: {what} {part!r} is not a Kubernetes name "
                             "(lower-case letters, digits, '-' and '.')")
    return PodAddress(parts[0], parts[1], parts[2] if len(parts) == 3 else None)


@dataclass(frozen=True, kw_only=True)
class PodTarget(EngineTarget):
    address: PodAddress

    @property
    def what(self) -> str:
        pod = f"pod {self.address.namespace}/{self.address.pod}"
        return f"container {self.address.container} of {pod}" if self.address.container else pod

    def command(self, remote: list[str]) -> list[str]:
        a = self.address
        container = ["-c", a.container] if a.container else []
        return [*self.prefix, "exec", "-i", "-n", a.namespace, a.pod, *container, "--", *remote]


class KubectlScheme(EngineScheme):
    scheme: ClassVar[str] = "k8s"
    form: ClassVar[str] = "k8s://NAMESPACE/POD[/CONTAINER]"
    options: ClassVar[type[K8sOptions]] = K8sOptions

    def check_address(self, rest: str) -> None:
        parse_pod_address(rest)

    def target(self, host: HostSpec) -> PodTarget:
        address = parse_pod_address((host.address or "").removeprefix("k8s://"))
        return PodTarget(name=host.name, prefix=kubectl_prefix(host.options_as(K8sOptions)), address=address)
