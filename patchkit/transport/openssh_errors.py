"""Why the OpenSSH client failed, in words a user can act on.

`ssh` exits 255 when it cannot connect, and says why on stderr in its own words (OpenSSH 7-9).
`classify` names the reason, `explain` writes the message, in the same terms as the asyncssh
transport's; `Resolved` is where OpenSSH would connect (`ssh -G`: the config applied, no network).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
from dataclasses import dataclass

from patchkit.inventory import HostSpec

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"

# Set-up failures worth another attempt: the remote command cannot have started.
TRANSIENT = ("refused", "reset", "closed", "timeout")


@dataclass
class Resolved:
    """The target after ~/.ssh/config: for messages and for `become` (are we root?)."""

    hostname: str
    port: int
    user: str | None
    known_hosts: str

    @classmethod
    async def ask(cls, ssh: str, options: list[str], host: HostSpec) -> Resolved:
        inventory_known = os.path.expanduser(host.known_hosts) if host.known_hosts else None
        fallback = cls(host.address or "", host.port or 22, host.user,
                       inventory_known or os.path.expanduser(DEFAULT_KNOWN_HOSTS))
        try:
            proc = await asyncio.create_subprocess_exec(
                ssh, "-G", *options, "--", host.address or "", stdin=asyncio.subprocess.DEVNULL,
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
            port = fallback.port
        return cls(values.get("hostname") or fallback.hostname, port, values.get("user") or fallback.user,
                   inventory_known or (os.path.expanduser(files[0]) if files else fallback.known_hosts))

    @property
    def pattern(self) -> str:
        """The host as known_hosts names it."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def keyscan(self) -> str:
        port = "" if self.port == 22 else f"-p {self.port} "
        return f"ssh-keyscan {port}{shlex.quote(self.hostname)} >> {shlex.quote(self.known_hosts)}"


def classify(lines: list[str]) -> str | None:
    """The reason in ssh's stderr, or None if none is recognised."""
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
    return [line for line in lines if line.strip() and not line.startswith("Warning: Permanently added")]


def explain(kind: str | None, lines: list[str], where: Resolved, name: str, timeout: int, attempts: int) -> str:
    label = f"{name} ({where.hostname}:{where.port})"
    text = "\n".join(lines)
    if kind == "changed_key":
        found = re.search(r"fingerprint for the (\S+) key sent by the remote host is\s*(SHA256:[A-Za-z0-9+/=]+)", text)
        presented = f"an {found.group(1)} key {found.group(2)}" if found else "another key"
        offending = re.search(r"Offending \S+ key in (.+):(\d+)$", text, re.MULTILINE)
        known = offending.group(1) if offending else where.known_hosts
        at = f" (line {offending.group(2)})" if offending else ""
        return (f"{label}: HOST KEY CHANGED: the host presented {presented}, which is not the key recorded for "
                f"{where.pattern} in {known}{at}; refusing to connect (the host may have been reinstalled, or "
                f"someone is in the middle). If the change is expected, remove the old entry with "
                f"`ssh-keygen -R {shlex.quote(where.pattern)} -f {shlex.quote(known)}` and add the new one with "
                f"`{where.keyscan()}` (--accept-new-host-keys never replaces a changed key)")
    if kind == "unknown_key":
        found = re.search(r"No (\S+) host key is known for", text)
        presented = f"an {found.group(1)} key" if found else "a key"
        return (f"{label}: host key unknown: no entry for {where.pattern} in {where.known_hosts} (the host "
                f"presented {presented}); refusing to connect. Check the fingerprint, then add it with "
                f"`{where.keyscan()}`, or rerun with --accept-new-host-keys to record the keys of hosts seen for "
                f"the first time")
    if kind == "host_key":
        return f"{label}: host key verification failed: {' '.join(_ssh_lines(lines)[-3:])}"
    if kind == "auth":
        denied = next((line for line in lines if "Permission denied (" in line), "Permission denied")
        reason = denied.split(": ", 1)[-1].rstrip(".")
        return (f"{label}: authentication failed as {where.user or '?'}: {reason} "
                f"(keys tried: ssh-agent, identity_file / ~/.ssh/config IdentityFile, ~/.ssh/id_*)")
    if kind == "resolve":
        found = re.search(r"Could not resolve hostname .*?: (.+)$", text, re.MULTILINE)
        return f"{label}: cannot resolve {where.hostname}: {found.group(1) if found else 'unknown name'}"
    if kind == "refused":
        hop = re.search(r"connect to host (\S+) port (\d+): Connection refused", text)
        if hop and (hop.group(1), int(hop.group(2))) != (where.hostname, where.port):
            return f"{label}: connection refused by {hop.group(1)}:{hop.group(2)} (a ProxyJump or ProxyCommand hop)"
        return f"{label}: connection refused"
    if kind == "reset":
        return f"{label}: connection reset"
    if kind == "closed":
        return f"{label}: connection closed by the host before the SSH handshake"
    if kind == "timeout":
        return f"{label}: no SSH connection within {timeout}s ({attempts} attempts)"
    said = " ".join(_ssh_lines(lines)[-3:])
    return f"{label}: SSH connection failed: {said or 'ssh exited with status 255'}"
