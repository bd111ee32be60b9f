"""The host agent (hostagent.py, runs on the target) and its control-side client."""

from patchkit.agent.client import AgentClient, AgentRefused, agent_argv

__all__ = ["AgentClient", "AgentRefused", "agent_argv"]
