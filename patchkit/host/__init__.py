"""Reaching a host and working on it: transports (`transport/`), the agent's control side
(`agent/`) and the stdlib-only files that run on the host (`remote/`)."""
