"""Test tiers by folder: a test's folder says what it needs, and gives it that marker.

    tests/unit/        pure: edits, loader, decisions, the fake runner (no sshd, podman or vLLM)
    tests/agent/       the real host agent on the local transport, through the real CLI
    tests/ssh/         real OpenSSH sshd processes on 127.0.0.1 (tests/sshd.py)
    tests/containers/  real podman containers and the docker CLI against podman's service
    tests/real/        real vLLM: release wheels (marker wheels), the cached environment (realenv)

`make test-unit` runs `-m unit` (minus what downloads wheels); `make test` runs everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "agent", "ssh", "containers", "real")
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            tier = Path(item.path).resolve().relative_to(HERE).parts[0]
        except ValueError:
            continue
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
