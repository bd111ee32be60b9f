"""The host agent, control side: its client (client.py), which starts it through a transport and
sends it requests, and the typed ops (protocol.py). What runs on the host is in host/remote/."""

from patchkit.host.agent.client import AgentClient, AgentRefused, agent_argv

__all__ = ["AgentClient", "AgentRefused", "agent_argv"]
