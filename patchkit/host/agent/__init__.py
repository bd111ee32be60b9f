"""The host agent: its control-side client (client.py) and the files it runs on hosts (host/)."""

from patchkit.host.agent.client import AgentClient, AgentRefused, agent_argv

__all__ = ["AgentClient", "AgentRefused", "agent_argv"]
