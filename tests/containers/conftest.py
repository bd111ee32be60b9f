"""The container tiers' shared set-up: podman's exec sessions cleaned up quickly, the test images built."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures import containers as images

EXEC_CLEANUP_DELAY_S = 15


@pytest.fixture(scope="session")
def quick_exec_cleanup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """podman keeps a conmon process for 5 min after every exec (containers.conf
    `exit_command_delay`, default 300 s), some 170 per run of this file: for these tests only,
    the system's containers.conf with a 15 s delay (CONTAINERS_CONF, inherited by podman, its
    service and every patchkit run). Not 0: the Docker API reads an exec's exit code from its
    session after it ended (`no exec session with ID ... found` without the delay)."""
    system = Path("/usr/share/containers/containers.conf")
    text = system.read_text() if system.is_file() else ""
    if "[engine]" not in text:
        text += "\n[engine]\n"
    conf = tmp_path_factory.mktemp("containers-conf") / "containers.conf"
    conf.write_text(text.replace("[engine]", f"[engine]\nexit_command_delay = {EXEC_CLEANUP_DELAY_S}", 1))
    old = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(conf)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CONTAINERS_CONF", None)
        else:
            os.environ["CONTAINERS_CONF"] = old


@pytest.fixture(scope="session")
def built_images(quick_exec_cleanup: None) -> None:
    """The test images, built now if missing: a missing podman is an error with its reason."""
    try:
        images.ensure_images()
    except images.MissingTool as exc:
        pytest.fail(str(exc), pytrace=False)
