"""`audit` and `capture` against hostile installs and wheels.

A hand-made distribution (dist-info with METADATA and RECORD) in a sandbox venv, read by the
real CLI and the real host agent (local transport). RECORD rows that leave the distribution's
folder (`..`, absolute paths, a symlinked folder, a link to /proc/self/pagemap), special files
(a FIFO, a link inside), a sparse 64 GiB file recorded as 10 bytes; a wheel whose member inflates
to 1 GiB while RECORD says 10 bytes; dangling symlinks where capture writes. No timed
assertions: a hang is caught by the subprocess timeout, memory by the child's peak RSS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.helpers import PATCHKIT, Result, make_venv

SPARSE = 64 << 30
BOMB = 1 << 30
SECRET = b"TOP SECRET: not this distribution's file\n"


def digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_dist(root: Path, name: str, files: dict[str, bytes], extra_rows: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A distribution `name` 1.0 in its own site folder, RECORD vouching for `files` as they
    are (then `extra_rows` as written); the venv's python and the site folder."""
    site = root / "site"
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = [f"{rel},sha256={digest(data)},{len(data)}" for rel, data in files.items()]
    (info / "RECORD").write_text("\n".join([*rows, *extra_rows, f"{info.name}/RECORD,,"]) + "\n")
    return make_venv(root, [site]), site


def patchkit(python: Path, state: Path, *args: str, timeout: float = 120) -> Result:
    proc = subprocess.run([PATCHKIT, *args, "-e", f"python={python}", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=timeout, check=False)
    result = Result(list(args), proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, result
    return result


# ---------------------------------------------------------------------- audit (item 5)


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path, Path]:
    """`hostile` 1.0 whose RECORD names files outside its folder and special files."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "secret.txt").write_bytes(SECRET)
    up = "../" * 12
    python, site = make_dist(tmp_path / "host", "hostile", {
        "hostile/__init__.py": b"",
        "hostile/mod.py": b"LIMIT = 1\n",
    }, (
        f"{up}etc/passwd,sha256={digest(b'x')},1",
        f"/etc/hostname,sha256={digest(b'x')},1",
        f"hostile/ext/secret.txt,sha256={digest(b'x')},{len(SECRET)}",
        f"{up}proc/self/pagemap,sha256={digest(b'x')},10",
        f"hostile/pagemap,sha256={digest(b'x')},10",
        f"hostile/alias.py,sha256={digest(b'LIMIT = 1')},10",
        f"hostile/pipe,sha256={digest(b'x')},10",
        f"hostile/big.bin,sha256={digest(b'x')},10",
    ))
    (site / "hostile" / "ext").symlink_to(secrets)
    (site / "hostile" / "pagemap").symlink_to("/proc/self/pagemap")
    (site / "hostile" / "alias.py").symlink_to("mod.py")  # stays inside, but a link: not read either
    os.mkfifo(site / "hostile" / "pipe")
    with (site / "hostile" / "big.bin").open("wb") as f:
        f.truncate(SPARSE)  # sparse: 64 GiB to read, nothing on disk
    (site / "hostile" / "mod.py").write_bytes(b"LIMIT = 2\n")  # a same-size hand edit: hashed
    return python, site, tmp_path / "state"


def test_audit_reads_only_regular_files_inside_the_distribution(hostile: tuple[Path, Path, Path]) -> None:
    python, site, state = hostile
    out = patchkit(python, state, "audit", "hostile", "--json", timeout=60)
    assert out.returncode == 3, out
    host = out.hosts()["local"]
    rows = {row["name"]: row for row in host["steps"]}
    assert set(rows) == {"hostile/mod.py", "hostile/alias.py", "hostile/pipe", "hostile/big.bin"}, rows
    assert rows["hostile/mod.py"]["sha256_after"] == hashlib.sha256(b"LIMIT = 2\n").hexdigest()
    assert rows["hostile/alias.py"]["details"]["change"] == "not a regular file"
    assert rows["hostile/pipe"]["details"]["change"] == "not a regular file"
    big = rows["hostile/big.bin"]
    assert big["details"]["change"] == "modified" and big["sha256_after"] is None, big
    assert f"({SPARSE} bytes, RECORD says 10; not hashed)" in big["message"], big
    [notice] = host["notices"]
    assert notice.startswith(f"5 RECORD row(s) outside {site} skipped, not read"), notice
    for rel in ("etc/passwd", "/etc/hostname", "hostile/ext/secret.txt", "proc/self/pagemap", "hostile/pagemap"):
        assert rel in notice, notice
    assert f"is a symlink to {(site.parent.parent / 'secrets').resolve()}" in notice, notice
    assert "5 row(s) outside its folder skipped" in host["message"]
    for secret in (SECRET, Path("/etc/passwd").read_bytes(), Path("/etc/hostname").read_bytes()):
        assert hashlib.sha256(secret).hexdigest() not in out.stdout  # never opened, never hashed
    assert "checked against RECORD" in host["message"] and "stopped at the time budget" not in host["message"]


def test_audit_stops_at_its_time_budget_and_says_so(tmp_path: Path) -> None:
    """A sparse 64 GiB file RECORD vouches for at its full size: hashing it takes minutes; the
    budget ends the run, which fails naming how far it got."""
    python, site = make_dist(tmp_path / "host", "huge", {"huge/__init__.py": b""},
                             (f"huge/huge.bin,sha256={digest(b'x')},{SPARSE}", f"huge/zz.py,sha256={digest(b'x')},1"))
    with (site / "huge" / "huge.bin").open("wb") as f:
        f.truncate(SPARSE)
    out = patchkit(python, tmp_path / "state", "audit", "huge", "--json", "--time-budget", "1", timeout=60)
    assert out.returncode == 1, out
    host = out.hosts()["local"]
    assert host["status"] == "failed"
    assert "stopped at the time budget (1 s): 2 files not checked (--time-budget raises it)" in host["message"], host


# ---------------------------------------------------------------------- capture (items 7, 8)


def write_zip(path: Path, members: dict[str, tuple[bytes, int, int]]) -> None:
    """A zip of members given as (deflate stream, uncompressed size, CRC-32): a bomb is written
    from its compressed form, never inflated here. Only what zipfile reads: local headers, the
    central directory, its end record."""
    local, central = bytearray(), bytearray()
    for name, (stream, size, crc) in members.items():
        raw = name.encode()
        offset = len(local)
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(stream), size, len(raw), 0)
        local += raw + stream
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, len(stream), size,
                               len(raw), 0, 0, 0, 0, 0, offset) + raw
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(local), 0)
    path.write_bytes(bytes(local + central) + end)


def deflated(data: bytes) -> tuple[bytes, int, int]:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(), len(data), zlib.crc32(data)


def zeros_deflated(size: int) -> tuple[bytes, int, int]:
    """`size` zero bytes as a deflate stream, built from one fully flushed MiB repeated (a
    full flush resets the compressor: each copy stands alone)."""
    assert size % (1 << 20) == 0
    mib = bytes(1 << 20)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    block = c.compress(mib) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size >> 20):
        crc = zlib.crc32(mib, crc)
    return block * (size >> 20) + zlib.compressobj(6, zlib.DEFLATED, -15).flush(), size, crc


PRISTINE = b"LIMIT = 1\n"  # 10 bytes


@pytest.fixture
def edited(tmp_path: Path) -> tuple[Path, Path, Path]:
    """`handpkg` 1.0 with handpkg/mod.py edited by hand; its pristine wheel."""
    python, site = make_dist(tmp_path / "host", "handpkg", {"handpkg/__init__.py": b"", "handpkg/mod.py": PRISTINE})
    (site / "handpkg" / "mod.py").write_bytes(b"LIMIT = 2\n")
    wheel = tmp_path / "handpkg-1.0-py3-none-any.whl"
    write_zip(wheel, {"handpkg/__init__.py": deflated(b""), "handpkg/mod.py": deflated(PRISTINE)})
    return python, tmp_path / "state", wheel


def test_capture_works_on_the_hand_made_dist(edited: tuple[Path, Path, Path], tmp_path: Path) -> None:
    python, state, wheel = edited
    out = tmp_path / "out"
    out.mkdir()
    done = patchkit(python, state, "capture", "handpkg", "-o", str(out / "r.yaml"), "--wheel", str(wheel), "--json")
    assert done.returncode == 0, done
    assert sorted(os.listdir(out)) == ["r-handpkg.patch", "r.yaml"]
    assert "+LIMIT = 2" in (out / "r-handpkg.patch").read_text()


@pytest.mark.parametrize("planted", ["r.yaml", "r-handpkg.patch"])
def test_capture_never_writes_through_a_dangling_symlink(edited: tuple[Path, Path, Path], tmp_path: Path,
                                                         planted: str) -> None:
    """The recipe (or its .patch) was created at the link's target, outside -o.
    A link at -o itself is refused before the host is read (exit 2); one at a .patch, whose name
    the capture decides, when it is written (the host fails, nothing written)."""
    python, state, wheel = edited
    out, victim = tmp_path / "out", tmp_path / "elsewhere" / "planted.txt"
    out.mkdir()
    victim.parent.mkdir()
    (out / planted).symlink_to(victim)
    done = patchkit(python, state, "capture", "handpkg", "-o", str(out / "r.yaml"), "--wheel", str(wheel), "--json")
    refusal = f"{out / planted} is a symlink (to {victim}): patchkit does not write through a symlink"
    if planted == "r.yaml":
        assert done.returncode == 2, done
        assert refusal in done.stderr and done.stderr.count("\n") == 1, done
    else:
        assert done.returncode == 1, done
        message = done.hosts()["local"]["message"]
        assert refusal in message and "nothing written" in message, message
    assert not victim.exists() and sorted(os.listdir(out)) == [planted]


def peak_rss_of(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run argv from a fresh interpreter and give the largest peak RSS (bytes) among its
    descendants (getrusage RUSAGE_CHILDREN in that interpreter: patchkit and its agent only)."""
    probe = ("import json, resource, subprocess, sys\n"
             "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=300)\n"
             "print(json.dumps([done.returncode, done.stdout, done.stderr,"
             " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))\n")
    ran = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=330, check=True)
    code, stdout, stderr, maxrss_kib = json.loads(ran.stdout)
    return subprocess.CompletedProcess(argv, code, stdout, stderr), maxrss_kib * 1024


@pytest.mark.parametrize("record_size", [10, BOMB], ids=["record-says-10-bytes", "record-says-1-GiB"])
def test_capture_never_inflates_a_wheel_member_past_record_s_size(tmp_path: Path, record_size: int) -> None:
    """A 3 GiB zero member once reached 6.2 GB RSS. A member whose size is
    not RECORD's is refused before a byte is inflated; one RECORD says is huge, by the cap."""
    python, site = make_dist(tmp_path / "host", "handpkg", {"handpkg/__init__.py": b""},
                             (f"handpkg/mod.py,sha256={digest(PRISTINE)},{record_size}",))
    (site / "handpkg" / "mod.py").write_bytes(b"LIMIT = 2\n")
    wheel = tmp_path / "handpkg-1.0-py3-none-any.whl"
    write_zip(wheel, {"handpkg/mod.py": zeros_deflated(BOMB)})
    assert wheel.stat().st_size < 2 << 20  # a megabyte that inflates to a gigabyte
    out = tmp_path / "r.yaml"
    done, peak = peak_rss_of([PATCHKIT, "capture", "handpkg", "-o", str(out), "--wheel", str(wheel), "--json",
                              "-e", f"python={python}", "--state-dir", str(tmp_path / "state")])
    assert done.returncode == 1, done
    message = json.loads(done.stdout)["hosts"]["local"]["message"]
    if record_size == 10:
        assert f"handpkg/mod.py in {wheel.name} is not the file RECORD names ({BOMB} bytes, RECORD says 10" \
            in message, message
    else:
        assert f"handpkg/mod.py is {BOMB} bytes, more than capture reads" in message, message
    assert not out.exists()
    assert peak < 300 << 20, f"peak RSS {peak >> 20} MiB"  # bounded: the member is 1 GiB inflated
    print(f"\ncapture on a {BOMB >> 30} GiB zip bomb (RECORD says {record_size}): exit {done.returncode}, "
          f"peak RSS {peak >> 20} MiB")


LATIN1_PRISTINE = b"# -*- coding: latin-1 -*-\nNAME = 'caf\xe9'\nLIMIT = 1\n"
LATIN1_EDITED = b"# -*- coding: latin-1 -*-\nNAME = 'na\xefve'\nLIMIT = 2\n"


def test_capture_reads_a_latin1_module_as_python_does(tmp_path: Path) -> None:
    """A module declaring latin-1 (PEP 263) is captured by its text as Python reads it, not
    refused with a UTF-8 decode traceback; the captured recipe, applied to the pristine file,
    gives back the hand-edited bytes, in latin-1."""
    python, site = make_dist(tmp_path / "host", "handpkg", {"handpkg/__init__.py": b"",
                                                            "handpkg/mod.py": LATIN1_PRISTINE})
    (site / "handpkg" / "mod.py").write_bytes(LATIN1_EDITED)
    wheel = tmp_path / "handpkg-1.0-py3-none-any.whl"
    write_zip(wheel, {"handpkg/__init__.py": deflated(b""), "handpkg/mod.py": deflated(LATIN1_PRISTINE)})
    out = tmp_path / "out"
    out.mkdir()
    done = patchkit(python, tmp_path / "state", "capture", "handpkg", "-o", str(out / "r.yaml"), "--wheel",
                    str(wheel), "--json")
    assert done.returncode == 0, done
    (site / "handpkg" / "mod.py").write_bytes(LATIN1_PRISTINE)
    applied = patchkit(python, tmp_path / "state", "apply", str(out / "r.yaml"), "--json")
    assert applied.returncode == 0, applied
    assert (site / "handpkg" / "mod.py").read_bytes() == LATIN1_EDITED
