"""The `docker` scheme: `docker://CONTAINER`, a running container reached by `docker exec -i`,
as podman's (podman.py) but through the docker CLI, with DOCKER_HOST as the user set it:

    docker [ENGINE_ARGS] exec -i [--user=USER] -- CONTAINER PYTHON -c BOOTSTRAP NONCE
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from patchkit.host.transport.podman import PodmanOptions, PodmanScheme


class DockerOptions(PodmanOptions):
    """Docker containers (or any engine the docker CLI talks to through DOCKER_HOST)."""

    engine: str | None = Field(default=None, description=(
        "The docker binary: a name looked up in PATH, or a path; default `docker`."))


class DockerScheme(PodmanScheme):
    scheme: ClassVar[str] = "docker"
    form: ClassVar[str] = "docker://CONTAINER"
    options: ClassVar[type[PodmanOptions]] = DockerOptions
