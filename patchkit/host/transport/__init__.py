"""How we reach a host: a process we can talk to over stdin/stdout. Nothing more."""

from patchkit.host.transport.base import AgentStreams, Transport
from patchkit.host.transport.local import LocalTransport

__all__ = ["AgentStreams", "Transport", "LocalTransport"]
