"""Test tiers by folder: a test's folder says what it needs, and gives it that marker.

    tests/unit/        pure: edits, loader, decisions, the fake runner (no sshd, podman or vLLM)
    tests/agent/       the real host agent on the local transport, through the real CLI
    tests/ssh/         real OpenSSH sshd processes on 127.0.0.1 (tests/sshd.py)
    tests/containers/  real podman containers and the docker CLI against podman's service
    tests/ray/         real local Ray clusters (ray.cluster_utils.Cluster, every node on 127.0.0.1)
    tests/real/        real vLLM: release wheels (marker wheels), the cached environment (realenv)

`make test-unit` runs `-m unit` (minus what downloads wheels); `make test` runs everything.

No test depends on what the user's caches hold: every patchkit a test runs gets a cache of the
session's own (PATCHKIT_CACHE_DIR, a fresh 0700 folder, removed at the end). What the fixtures
build (vLLM environments, wheels, models: minutes to make) stays in the user's cache root,
named to them by PATCHKIT_FIXTURES_CACHE (fixtures/vllm_envs.py cache_dir()).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import patchkit.run.steps.registry  # noqa: F401  (registers the step kinds, as the CLI does at start)
# In-process tests read inventories as the CLI does: once the transports declared their schemes
# (the addresses and options an inventory takes: patchkit/fleet/reach.py).
import patchkit.host.transport.schemes  # noqa: F401,E402

TIERS = ("unit", "agent", "ssh", "containers", "ray", "real")
HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PATCHKIT_FIXTURES_CACHE") is None:
        os.environ["PATCHKIT_FIXTURES_CACHE"] = os.environ.get("PATCHKIT_CACHE_DIR") or str(
            Path.home() / ".cache" / "patchkit")
        session_cache = tempfile.mkdtemp(prefix="patchkit-test-cache-")
        os.environ["PATCHKIT_CACHE_DIR"] = session_cache
        config.add_cleanup(lambda: shutil.rmtree(session_cache, ignore_errors=True))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            tier = Path(item.path).resolve().relative_to(HERE).parts[0]
        except ValueError:
            continue
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """Test files are imported by their basename (no __init__.py in the tier folders): two of
    one name in two tiers would stop the whole collection, so say which at once."""
    if file_path.name.startswith("test_") and file_path.suffix == ".py":
        same = sorted(str(p.relative_to(HERE)) for p in HERE.glob(f"*/{file_path.name}"))
        if len(same) > 1:
            raise pytest.UsageError(f"test files share a name across tiers: {', '.join(same)}; rename one")
