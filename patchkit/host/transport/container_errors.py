"""What a container engine's failure means, from its exit code and stderr (no I/O here).

`podman exec`, `docker exec` and `kubectl exec` fail before the agent starts in a few ways a
user must tell apart: the container or pod does not exist, it is not running, the image has
no such interpreter, the engine cannot reach its service (Docker daemon, API server), or exec
is not allowed. Each kind has ONE message (MESSAGES); `classify` maps the engine's own words
(measured on podman 4.3, docker 28 against podman's service; kubectl's from its sources and
documentation) to a kind, None when the text is none of them (then stderr's tail is shown).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from patchkit.base.errors import HostUnreachable


class ContainerFailure(HostUnreachable):
    """No agent in the container or pod; `kind` names why (a key of MESSAGES)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Where:
    """What a message names: the inventory's host, the container or pod, the engine."""

    host: str
    what: str  # "container web-1" or "pod ns/web-1" or "container c of pod ns/web-1"
    engine: str
    python: str = "python3"


MESSAGES: dict[str, str] = {
    "engine_missing": "{host}: the container engine `{engine}` is not on this machine (not in PATH); "
                      "install it or set `engine:` to its path in the inventory",
    "not_found": "{host}: {what} not found ({engine}: {detail})",
    "not_running": "{host}: {what} is not running ({engine}: {detail})",
    "no_python": "{host}: no interpreter {python} in {what} ({detail}); set `python:` to the image's "
                 "interpreter, or bake one into the image",
    "no_user": "{host}: {what} has no user {detail}",
    "engine_unreachable": "{host}: {engine} cannot reach its service: {detail}",
    "forbidden": "{host}: not allowed to exec into {what}: {detail}",
}

# (kind, pattern) in order: the first pattern found in stderr wins. Patterns are the engines'
# own texts, lower-cased before matching.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(pattern)) for kind, pattern in (
    # podman: `Error: no container with name or ID "x" found: no such container` (also through
    # its Docker API); Docker's own daemon: `Error response from daemon: No such container: x`
    ("not_found", r"no container with name or id .* found|no such container"),
    # kubectl: `Error from server (NotFound): pods "x" not found`, `namespaces "ns" not found`;
    # a container the pod lacks: `container not found ("c")`, `container c is not valid for pod p`
    ("not_found", r"\(notfound\)|container not found|is not valid for pod"),
    # podman: `can only create exec sessions on running containers: container state improper`;
    # Docker: `Container x is not running`, `is paused`; kubectl: `cannot exec into a container in
    # a completed pod; current phase is Succeeded`, `pod has no running containers`...
    ("not_running", (r"can only create exec sessions on running containers|is not running|is paused|"
                     r"cannot exec into a container in a completed pod|container state improper")),
    # runc/crun through podman, docker, CRI: `exec: "python3": executable file not found in $PATH`,
    # `exec: "/usr/bin/python9": stat /usr/bin/python9: no such file or directory`
    ("no_python", (r"executable file not found|exec: \"[^\"]*\": stat [^:]*: no such file or directory|"
                   r"oci runtime attempted to invoke a command that was not found")),
    ("no_user", r"unable to find user|no matching entries in passwd file"),
    # docker without a daemon; kubectl without an API server
    ("engine_unreachable", (r"cannot connect to the docker daemon|is the docker daemon running|"
                            r"the connection to the server .* was refused|unable to connect to the server|"
                            r"error loading config file|context .* does not exist|no configuration has been provided")),
    ("forbidden", r"\(forbidden\)|permission denied while trying to connect"),
))

_USER = re.compile(r"unable to find user ([^:\s]+)")


# What an engine says on stderr about a working exec: not the agent's session, never reported.
# kubectl without -c on a pod of several containers: `Defaulted container "vllm" out of: vllm, sidecar`.
_ENGINE_NOTES = re.compile(r'Defaulted container "[^"]*" out of: ')


def is_engine_note(line: str) -> bool:
    return _ENGINE_NOTES.match(line) is not None


def classify(lines: list[str]) -> str | None:
    """The kind of failure these stderr lines show, None if none."""
    text = "\n".join(lines).lower()
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    return None


def _detail(lines: list[str], kind: str) -> str:
    """The engine's line that says it, without its `Error:` prefix."""
    wanted = [p for k, p in _PATTERNS if k == kind]
    line = next((ln for ln in lines if any(p.search(ln.lower()) for p in wanted)), lines[-1] if lines else "")
    if kind == "no_user":
        found = _USER.search(line)
        return found.group(1) if found else line.strip()
    return re.sub(r"^(error response from daemon|error from server \(\w+\)|error):\s*", "", line.strip(),
                  flags=re.IGNORECASE)


def container_failure(kind: str, where: Where, lines: list[str] | None = None, **facts: Any) -> ContainerFailure:
    facts.setdefault("detail", _detail(lines or [], kind))
    message = MESSAGES[kind].format(host=where.host, what=where.what, engine=where.engine, python=where.python,
                                    **facts)
    return ContainerFailure(message, kind)


def failure_from(lines: list[str], where: Where) -> ContainerFailure | None:
    """The failure these stderr lines of a failed exec show, None if they show none of the kinds."""
    kind = classify(lines)
    return None if kind is None else container_failure(kind, where, lines)
