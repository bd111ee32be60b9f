"""No test depends on what the user's caches hold (tests/conftest.py): the patchkit a test runs
keeps its cache in the session's own folder, while the fixtures' heavy inputs stay in the
user's cache root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fixtures import vllm_envs
from patchkit.base import cache


def test_patchkit_under_test_keeps_its_cache_apart_from_the_users() -> None:
    users = Path(os.environ["PATCHKIT_FIXTURES_CACHE"])
    session = Path(os.environ["PATCHKIT_CACHE_DIR"])
    assert cache.cache_dir() == session != users
    assert not session.is_relative_to(users) and not users.is_relative_to(session)
    assert session.stat().st_uid == os.geteuid() and stat.S_IMODE(session.stat().st_mode) == 0o700
    assert vllm_envs.cache_dir() == users  # environments and wheels are built once, not per session
