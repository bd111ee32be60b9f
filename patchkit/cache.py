"""The control machine's cache folder (source hashes, edit results). Losing it only costs time."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    return Path(os.environ.get("PATCHKIT_CACHE_DIR") or Path.home() / ".cache" / "patchkit")


def write_json_quietly(path: Path, data: Any) -> None:
    """Atomic (temp file + rename) and best effort: a cache we cannot write only costs time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass
