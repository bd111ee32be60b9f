"""asyncssh, imported without its slow probe for liboqs.

At import, asyncssh asks `ctypes.util.find_library` for "oqs" and "liboqs" (optional
post-quantum key exchange). On Linux each miss runs `ldconfig -p`, then gcc, then ld:
about 45 ms of subprocesses on the critical path of every SSH run (profiled with
cProfile, bench/README.md). During that import only, a miss is decided from the files
those programs would look at: the ld.so cache and the usual library folders. If liboqs
may be there, the real find_library runs, so asyncssh finds it as before.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
from contextlib import contextmanager
from typing import Iterator

LD_SO_CACHE = "/etc/ld.so.cache"
LIBRARY_GLOBS = ("/lib*/", "/usr/lib*/", "/usr/local/lib*/", "/lib*/*/", "/usr/lib*/*/", "/usr/local/lib*/*/")
PROBED = {"oqs", "liboqs"}


def liboqs_may_be_installed() -> bool:
    try:
        with open(LD_SO_CACHE, "rb") as f:
            if b"liboqs" in f.read():
                return True
    except OSError:
        return True  # no cache to read: let find_library decide
    folders = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    patterns = [os.path.join(d, "liboqs.so*") for d in folders] + [g + "liboqs.so*" for g in LIBRARY_GLOBS]
    return any(glob.glob(pattern) for pattern in patterns)


@contextmanager
def quick_liboqs_probe() -> Iterator[None]:
    real = ctypes.util.find_library
    present = liboqs_may_be_installed()

    def find_library(name: str) -> str | None:
        if name in PROBED and not present:
            return None
        return real(name)

    ctypes.util.find_library = find_library
    try:
        yield
    finally:
        ctypes.util.find_library = real


with quick_liboqs_probe():
    import asyncssh  # noqa: E402

__all__ = ["asyncssh"]
