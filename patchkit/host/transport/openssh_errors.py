"""Why the OpenSSH client failed, as the failure kinds both SSH transports share.

`ssh` exits 255 when it cannot connect, and says why on stderr in its own words (OpenSSH 7-9).
`classify` names the kind, `openssh_failure` collects its facts for `ssh_common.connect_error`
(one class and one message per kind, as the asyncssh transport raises them); `resolve` is where
OpenSSH would connect (`ssh -G`: the config applied, no network).
"""

from __future__ import annotations

import asyncio
import os
import re

from patchkit.host.transport.ssh_common import Endpoint, SSHFailure, SSHTarget, connect_error

PERMANENTLY_ADDED = "Warning: Permanently added"  # accept-new recorded a key: no failure


async def resolve(ssh: str, options: list[str], target: SSHTarget) -> Endpoint:
    """The target after ~/.ssh/config: for messages and for `become` (are we root?)."""
    inventory_known = os.path.expanduser(target.known_hosts) if target.known_hosts else None
    fallback = Endpoint(target.name, target.address, target.port or 22, target.user, target.known_hosts_path)
    try:
        proc = await asyncio.create_subprocess_exec(
            ssh, "-G", *options, "--", target.address, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    except OSError:
        return fallback
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 5)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return fallback
    if proc.returncode != 0:
        return fallback
    values: dict[str, str] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key.lower(), value.strip())
    files = values.get("userknownhostsfile", "").split()
    try:
        port = int(values.get("port", ""))
    except ValueError:
        port = fallback.port or 22
    return Endpoint(target.name, values.get("hostname") or fallback.hostname, port,
                    values.get("user") or fallback.user,
                    inventory_known or (os.path.expanduser(files[0]) if files else fallback.known_hosts))


def classify(lines: list[str]) -> str | None:
    """The failure kind in ssh's stderr, or None if none is recognised."""
    text = "\n".join(lines)
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "has changed and you have requested strict" in text:
        return "changed_key"
    if re.search(r"host key is known for \S+ and you have requested strict", text):
        return "unknown_key"
    if "Host key verification failed" in text:
        return "host_key"
    if "Permission denied (" in text:
        return "auth"
    if "Could not resolve hostname" in text:
        return "resolve"
    if "Connection refused" in text:
        return "refused"
    if re.search(r"connect to host .* timed out|timed out during banner exchange", text):
        return "timeout"
    for line in lines:  # before the key exchange: nothing ran yet (later, the same words are ambiguous)
        if line.startswith("kex_exchange_identification:") or "banner exchange" in line:
            return "reset" if "reset" in line.lower() else "closed"
    return None


def _ssh_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.strip() and not line.startswith(PERMANENTLY_ADDED)]


def openssh_failure(returncode: int | None, lines: list[str], where: Endpoint, *, timeout: float,
                    attempts: int) -> SSHFailure | None:
    """ssh's exit status and stderr as a failure kind both transports share; None when ssh did
    not fail itself (any status but 255: the remote command ran, and its own error says why)."""
    if returncode != 255:
        return None
    kind = classify(lines)
    text = "\n".join(lines)
    if kind == "changed_key":
        found = re.search(r"fingerprint for the (\S+) key sent by the remote host is\s*(SHA256:[A-Za-z0-9+/=]+)", text)
        offending = re.search(r"Offending \S+ key in (.+):(\d+)$", text, re.MULTILINE)
        return connect_error(kind, where, presented=f"an {found.group(1)} key {found.group(2)}" if found else "a key",
                             recorded_in=offending.group(1) if offending else None,
                             at_line=f" (line {offending.group(2)})" if offending else "")
    if kind == "unknown_key":
        found = re.search(r"No (\S+) host key is known for", text)
        return connect_error(kind, where, presented=f"an {found.group(1)} key" if found else "a key")
    if kind == "host_key":
        return connect_error(kind, where, detail=" ".join(_ssh_lines(lines)[-3:]))
    if kind == "auth":
        denied = next((line for line in lines if "Permission denied (" in line), "Permission denied")
        return connect_error(kind, where, reason=denied.split(": ", 1)[-1].rstrip("."))
    if kind == "resolve":
        found = re.search(r"Could not resolve hostname .*?: (.+)$", text, re.MULTILINE)
        return connect_error(kind, where, reason=found.group(1) if found else "unknown name")
    if kind == "refused":
        hop = re.search(r"connect to host (\S+) port (\d+): Connection refused", text)
        if hop and (hop.group(1), int(hop.group(2))) != (where.hostname, where.port or 22):
            return connect_error("refused_by_hop", where, hop=f"{hop.group(1)}:{hop.group(2)}")
        return connect_error(kind, where)
    if kind == "timeout":
        return connect_error(kind, where, timeout=timeout, attempts=attempts)
    if kind in ("reset", "closed"):
        return connect_error(kind, where)
    return connect_error("failed", where, detail=" ".join(_ssh_lines(lines)[-3:]) or "ssh exited with status 255")
