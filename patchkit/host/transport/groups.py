"""Groups resolved at run time, each by its own kind's module: pod selectors by kubectl
(kubectl.py), Ray groups from the cluster (raycluster.py, which imports Ray only then)."""

from __future__ import annotations

from patchkit.fleet.inventory import Defaults, HostSpec, PodSelector, Resolved


def resolve_group(group: str, found: Resolved, defaults: Defaults) -> tuple[list[HostSpec], list[str]]:
    """The hosts of a group resolved at run time, and a note per member left out (HostError)."""
    if isinstance(found, PodSelector):
        from patchkit.host.transport.kubectl import resolve_selector

        return resolve_selector(group, found, defaults)
    from patchkit.host.transport.raycluster import resolve_ray_group

    return resolve_ray_group(group, found, defaults)
