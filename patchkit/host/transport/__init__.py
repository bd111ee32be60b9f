"""How we reach a host: a process we can talk to over stdin/stdout. Nothing more.

schemes.py names every scheme (local, ssh, podman, docker, k8s, ray); each scheme's module
declares its addresses and options, and builds its transport (base.py: the protocol)."""

from patchkit.host.transport.base import AgentStreams, Transport

__all__ = ["AgentStreams", "Transport"]
