"""The deploy sources' hash cache (manifest.py): sealed like every cache entry, so a
hand-edited digest or a malformed file is hashed again, never trusted or a traceback."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from patchkit.run.steps import manifest


@pytest.fixture(name="src")
def src_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "drafter"
    src.mkdir()
    (src / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    return src


def digest_of(src: Path) -> str:
    return hashlib.sha256((src / "config.json").read_bytes()).hexdigest()


def test_an_edited_digest_is_not_believed(src: Path) -> None:
    [first] = manifest.source_manifest(src)
    assert first.sha256 == digest_of(src)
    path = manifest.cache_file()
    text = path.read_text()
    assert digest_of(src) in text
    path.write_text(text.replace(digest_of(src), "0" * 64))  # size and mtime still match the file
    [again] = manifest.source_manifest(src)
    assert again.sha256 == digest_of(src)


@pytest.mark.parametrize("content", ["[]", "{", '{"hashes": []}', '{"hashes": {"x": 1}, "seal": "y"}', "7"])
def test_a_malformed_hash_cache_is_hashed_again(src: Path, content: str) -> None:
    manifest.cache_file().parent.mkdir(parents=True, mode=0o700)
    manifest.cache_file().write_text(content)
    [entry] = manifest.source_manifest(src)
    assert entry.sha256 == digest_of(src)
    assert json.loads(manifest.cache_file().read_text())["seal"]
