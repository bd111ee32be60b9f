"""The `ssh` scheme: a bare host name or address (~/.ssh/config may alias it, so any name will
do), or no address at all (the host's name). Its options say how to log in, and which client
reaches the host: the embedded asyncssh (ssh.py, or the SSH helper process: sshhelper.py) or
the system OpenSSH `ssh` (openssh.py). Light: a client's module, and what it imports, loads
only when a host uses it (the SSH helper process builds no inventory models).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from patchkit.fleet.reach import TransportOptions

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.transport.base import Reach, Transport

# Which SSH client reaches a host: the embedded asyncssh (default) or the system OpenSSH `ssh`
# (its own config and auth features, and a faster data path for bulk deploys).
SSHClient = Literal["asyncssh", "openssh"]
# How the host agent starts over SSH: its source on stdin (one round trip after the exec), or
# in the exec's command line (~20 KB of base64 in argv, visible in `ps`; docs/fleets.md).
AgentStart = Literal["stdin", "command"]


class SSHOptions(TransportOptions):
    """SSH hosts (the host's `user` is the login). Unset values are left to ~/.ssh/config
    (HostName, Port, User, IdentityFile), as OpenSSH reads it."""

    port: int | None = Field(default=None, ge=1, le=65535,
                             description="The SSH port; default: ~/.ssh/config's Port for the host, else 22.")
    identity_file: str | None = Field(default=None, description=(
        "A private key to log in with (`~` is expanded); the ssh-agent's keys, ~/.ssh/config's IdentityFile "
        "and ~/.ssh/id_* are tried too."))
    known_hosts: str | None = Field(default=None, description=(
        "The known_hosts file the host's key is checked against; default: ~/.ssh/config's UserKnownHostsFile, "
        "else ~/.ssh/known_hosts. An unknown key is refused (`--accept-new-host-keys` records it), a changed "
        "one always."))
    become: bool = Field(default=False, description=(
        "Run the agent as root through `sudo -n` (passwordless sudo for the target interpreter), unless the "
        "login is root."))
    ssh_client: SSHClient = Field(default="asyncssh", description=(
        "`asyncssh` (embedded) or `openssh` (the system `ssh`: its own config and auth features, and a "
        "faster data path for bulk deploys)."))
    agent_start: AgentStart = Field(default="stdin", description=(
        "`stdin`: the agent's source follows the exec; `command`: it rides in the exec's command line (one "
        "round trip less, ~20 KB visible to `ps` and audit logs; never with `become`)."))


class SSHScheme:
    """Any bare address but `local`; the host's `ssh_client` picks the client."""

    form = "a host name or address (SSH)"
    written = False
    options = SSHOptions

    def check_address(self, rest: str) -> None:
        return None  # any name will do: ~/.ssh/config may alias it

    def for_host(self, host: HostSpec, reach: Reach) -> Transport:
        from patchkit.host.transport.ssh_common import SSHTarget

        target = SSHTarget.from_host(host, reach.accept_new_host_keys)  # all an SSH transport knows of the host
        if host.options_as(SSHOptions).ssh_client == "openssh":
            from patchkit.host.transport.openssh import OpenSSHTransport  # the system `ssh`, opted in per host

            return OpenSSHTransport(target)
        from patchkit.host.transport import sshhelper

        helper = sshhelper.current()
        if helper is not None:  # asyncssh runs in the helper, imported while this process validated
            return sshhelper.HelperTransport(target, helper)
        from patchkit.host.transport.ssh import SSHTransport  # asyncssh only when a host needs it

        return SSHTransport(target)

    def reported(self, host: HostSpec) -> tuple[str, str]:
        return f"ssh/{host.options_as(SSHOptions).ssh_client}", host.address or host.name
