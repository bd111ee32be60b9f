"""Starting a local process with its three pipes: how every subprocess-based transport (local,
the OpenSSH client, the container engines) starts what runs the agent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

READ_LIMIT = 1 << 26  # a reply line may carry a whole file


async def start_piped(argv: Sequence[str], own_session: bool = True) -> asyncio.subprocess.Process:
    """`argv` with stdin, stdout and stderr piped (OSError when it cannot start). In its own
    session, Ctrl-C reaches patchkit only, which finishes the request in progress."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=READ_LIMIT,
        start_new_session=own_session,
    )
