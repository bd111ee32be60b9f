"""asyncssh, imported without its slow probe for liboqs.

At import, asyncssh asks `ctypes.util.find_library` for "oqs" and "liboqs" (optional
post-quantum key exchange). On Linux each miss runs `ldconfig -p`, then gcc, then ld:
about 45 ms of subprocesses on the critical path of every SSH run (profiled with
cProfile, bench/README.md). During that import only, a miss is decided from the files
those programs would look at: the ld.so cache and the usual library folders. If liboqs
may be there, the real find_library runs, so asyncssh finds it as before.

And without its X.509 support: asyncssh imports cryptography.x509 for X.509 certificate
keys (RFC 6187, `x509v3-*` algorithms), ~20% of its import time. patchkit
reaches hosts with OpenSSH keys, certificates and known_hosts only, and asyncssh treats
X.509 as optional (it catches the ImportError): an `x509v3-*` known_hosts line is then
skipped, so such a host's key is unknown and refused, never accepted unchecked.

And without cryptography's deprecation warnings about asyncssh's own code: cryptography 51
deprecates DSA, and asyncssh names DSA types at import (five warnings, ten lines on stderr for
every command that reads an inventory). They are for asyncssh's authors, not for patchkit's
users: muted for that category from asyncssh's modules only, for the whole process (asyncssh
also reaches DSA when it loads keys); every other warning is shown as before.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
import sys
import warnings
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


X509_MODULE = "asyncssh.crypto.x509"


@contextmanager
def without_x509() -> Iterator[None]:
    """During the import only: asyncssh's X.509 module reads as missing (None in sys.modules)."""
    had = X509_MODULE in sys.modules
    if not had:
        sys.modules[X509_MODULE] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if not had and sys.modules.get(X509_MODULE, 0) is None:
            del sys.modules[X509_MODULE]


def mute_asyncssh_deprecations() -> None:
    from cryptography.utils import CryptographyDeprecationWarning

    warnings.filterwarnings("ignore", category=CryptographyDeprecationWarning, module=r"asyncssh(\.|$)")


mute_asyncssh_deprecations()
with quick_liboqs_probe(), without_x509():
    import asyncssh  # noqa: E402

__all__ = ["asyncssh"]
