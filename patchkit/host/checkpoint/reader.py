"""Read a checkpoint folder's config and safetensors headers, without torch or numpy.

This file is shipped as source to remote hosts and run there by the host agent (ahead of
host/remote/checkpoint.py, in the agent's namespace), so it must stay: stdlib only, compatible with Python 3.8, free of imports from patchkit, and
free of ``from __future__`` imports (the source may be embedded in another module).

One public function, :func:`read_checkpoint`. It never raises for bad input: every
problem it meets becomes one line in the ``problems`` list of the returned view, which
is a plain JSON-serialisable dict::

    {
      "path": "/abs/path",
      "config": {...} or None,           # parsed config.json
      "index": {"weight_map": {...}} or None,  # parsed model.safetensors.index.json
      "layout": "single" | "sharded" | "multi" | None,  # multi: several
                                         # *.safetensors without an index
      "files": {
        "model.safetensors": {
          "size": 12345,                  # None if the file is missing
          "tensors": {"d2t": {"dtype": "I64", "shape": [256]}, ...}  # None if unreadable
        }
      },
      "problems": ["model.safetensors: truncated: ...", ...]
    }

A safetensors file is an 8-byte little-endian header length N, then N bytes of JSON
mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
relative to the end of the header), plus an optional "__metadata__" entry (ignored).
Only the header is read, never tensor data, and reads are capped so a hostile file
cannot exhaust memory.

Also runnable as a script: ``python reader.py DIR`` prints the view as JSON.
"""

import json
import os
import struct
import sys
from typing import Any, Iterable  # for the type comments (this file has no annotations: see above)

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
SAFETENSORS_SUFFIX = ".safetensors"

# Real headers are small (about 10 MB for a checkpoint with 100k tensors).
MAX_HEADER_BYTES = 100 * 1024 * 1024
# config.json and the index are small too; the cap only guards against garbage.
MAX_JSON_BYTES = 64 * 1024 * 1024
# How many names one problem line lists before "and N more".
MAX_NAMES_IN_LINE = 8

# Bytes per element, for the data-length check; dtypes not listed are not checked.
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "E8M0": 1,
    "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
    "U32": 4, "I32": 4, "F32": 4,
    "U64": 8, "I64": 8, "F64": 8,
}


class _Bad(Exception):
    """A problem with one file, already phrased for the problems list."""


def _names(names):  # type: (Iterable[str]) -> str
    names = list(names)
    shown = ", ".join(names[:MAX_NAMES_IN_LINE])
    if len(names) > MAX_NAMES_IN_LINE:
        shown += ", and %d more" % (len(names) - MAX_NAMES_IN_LINE)
    return shown


def _is_int(value):  # type: (object) -> bool
    return isinstance(value, int) and not isinstance(value, bool)


def _describe_error(exc):  # type: (BaseException) -> str
    text = str(exc).strip() or type(exc).__name__
    if len(text) > 200:
        text = text[:200] + "..."
    return text


def _read_json_file(path, label):  # type: (str, str) -> dict[str, Any]
    """Parse a small JSON file; raise _Bad with a one-line reason."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise _Bad("%s: cannot be read (%s)" % (label, _describe_error(exc)))
    if size > MAX_JSON_BYTES:
        raise _Bad("%s: %d bytes, larger than the %d MB limit for this file"
                   % (label, size, MAX_JSON_BYTES // (1024 * 1024)))
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise _Bad("%s: cannot be read (%s)" % (label, _describe_error(exc)))
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _Bad("%s: not valid UTF-8 (%s)" % (label, _describe_error(exc)))
    except ValueError as exc:
        raise _Bad("%s: not valid JSON (%s)" % (label, _describe_error(exc)))
    except RecursionError:
        raise _Bad("%s: not valid JSON (nested too deeply)" % label)
    if not isinstance(data, dict):
        raise _Bad("%s: top level is a JSON %s, expected an object"
                   % (label, type(data).__name__))
    return data


def _read_header(path, name):  # type: (str, str) -> tuple[int | None, dict[str, Any] | None, list[str]]
    """Return (size, tensors, problems) for one safetensors file.

    tensors is None when the header cannot be read at all. problems lists what is
    wrong even when the header itself is readable (e.g. data cut off).
    """
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        return None, None, ["%s: cannot be read (%s)" % (name, _describe_error(exc))]
    if size < 8:
        what = "empty (0 bytes)" if size == 0 else "only %d bytes" % size
        return size, None, ["%s: truncated or not a safetensors file: %s, shorter than "
                            "the 8-byte header length" % (name, what)]
    try:
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > size - 8:
                return size, None, [
                    "%s: truncated or not a safetensors file: header length %d bytes "
                    "is beyond the end of the file (%d bytes)" % (name, header_len, size)]
            if header_len > MAX_HEADER_BYTES:
                return size, None, [
                    "%s: header length %d bytes exceeds the %d MB limit; corrupt or not "
                    "a safetensors file" % (name, header_len, MAX_HEADER_BYTES // (1024 * 1024))]
            raw = f.read(header_len)
    except OSError as exc:
        return size, None, ["%s: cannot be read (%s)" % (name, _describe_error(exc))]
    if len(raw) != header_len:
        return size, None, ["%s: truncated: header cut off while reading" % name]
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return size, None, ["%s: header is not valid JSON; corrupt or not a safetensors "
                            "file (%s)" % (name, _describe_error(exc))]
    except RecursionError:
        return size, None, ["%s: header is not valid JSON (nested too deeply)" % name]
    if not isinstance(header, dict):
        return size, None, ["%s: header is a JSON %s, expected an object"
                            % (name, type(header).__name__)]

    problems = []
    tensors = {}
    malformed = []
    wrong_length = []
    data_start = 8 + header_len
    data_size = size - data_start
    beyond = []  # (end, tensor name) of tensors whose data lies past the end
    for tname in sorted(header):
        if tname == "__metadata__":
            continue
        info = header[tname]
        if not isinstance(info, dict):
            malformed.append(tname)
            continue
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if (not isinstance(dtype, str)
                or not isinstance(shape, list)
                or not all(_is_int(d) and d >= 0 for d in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            malformed.append(tname)
            continue
        tensors[tname] = {"dtype": dtype, "shape": list(shape)}
        if dtype in DTYPE_BYTES:
            count = 1
            for d in shape:
                count *= d
            if offsets[1] - offsets[0] != count * DTYPE_BYTES[dtype]:
                wrong_length.append(tname)
        if offsets[1] > data_size:
            beyond.append((offsets[1], tname))
    if malformed:
        problems.append("%s: malformed header entry (needs dtype, shape and data_offsets) "
                        "for %d tensor(s): %s" % (name, len(malformed), _names(malformed)))
    if wrong_length:
        problems.append("%s: data length does not match dtype and shape for %d tensor(s): %s"
                        % (name, len(wrong_length), _names(wrong_length)))
    if beyond:
        end, tname = max(beyond)
        problems.append("%s: truncated: file is %d bytes, but the data of tensor %s ends at "
                        "byte %d (%d of %d tensors incomplete)"
                        % (name, size, tname, data_start + end, len(beyond),
                           len(tensors)))
    return size, tensors, problems


def _plain_name(name):  # type: (object) -> bool
    return (isinstance(name, str) and name not in ("", ".", "..")
            and "/" not in name and "\\" not in name and "\0" not in name)


def _read_index(path, view):  # type: (str, dict[str, Any]) -> list[str] | None
    """Parse the index; return the sorted shard names (or None if unusable)."""
    problems = view["problems"]
    try:
        data = _read_json_file(path, INDEX_NAME)
    except _Bad as exc:
        problems.append(str(exc))
        return None
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict):
        problems.append("%s: no \"weight_map\" object" % INDEX_NAME)
        return None
    clean = {}
    bad_names = set()
    for tname, shard in weight_map.items():
        if not isinstance(shard, str):
            bad_names.add(repr(shard))
        elif not _plain_name(shard):
            bad_names.add(shard)
        else:
            clean[tname] = shard
    if bad_names:
        problems.append("%s: weight_map names files that are not plain file names in the "
                        "checkpoint folder: %s" % (INDEX_NAME, _names(sorted(bad_names))))
    view["index"] = {"weight_map": clean}
    return sorted(set(clean.values()))


def _other_weight_files(folder):  # type: (str) -> list[str]
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return []
    return [e for e in entries if e.endswith((".bin", ".pt", ".pth", ".gguf"))
            and not e.startswith(".")]


def _read_checkpoint(path, view):  # type: (str, dict[str, Any]) -> None
    folder = os.path.abspath(os.path.expanduser(str(path)))
    view["path"] = folder
    problems = view["problems"]
    if not os.path.exists(folder):
        problems.append("%s: checkpoint folder does not exist" % folder)
        return
    if not os.path.isdir(folder):
        problems.append("%s: not a folder (a checkpoint is a folder with config.json and "
                        "*.safetensors)" % folder)
        return

    config_path = os.path.join(folder, CONFIG_NAME)
    if not os.path.isfile(config_path):
        problems.append("%s: missing" % CONFIG_NAME)
    else:
        try:
            view["config"] = _read_json_file(config_path, CONFIG_NAME)
        except _Bad as exc:
            problems.append(str(exc))

    index_path = os.path.join(folder, INDEX_NAME)
    if os.path.isfile(index_path):
        view["layout"] = "sharded"
        shards = _read_index(index_path, view)
        if shards is None:
            return
        if not shards:
            problems.append("%s: weight_map is empty" % INDEX_NAME)
            return
    else:
        # Like vLLM without an index: every *.safetensors file in the folder.
        try:
            entries = sorted(os.listdir(folder))
        except OSError as exc:
            problems.append("%s: cannot list the folder (%s)" % (folder, _describe_error(exc)))
            return
        shards = [e for e in entries if e.endswith(SAFETENSORS_SUFFIX)
                  and not e.startswith(".")
                  and os.path.isfile(os.path.join(folder, e))]
        if not shards:
            others = _other_weight_files(folder)
            hint = ""
            if others:
                hint = ("; found %s, which cannot be checked without torch: convert it to "
                        "safetensors" % _names(others))
            problems.append("%s: missing (no *.safetensors file and no %s)%s"
                            % (SINGLE_NAME, INDEX_NAME, hint))
            return
        view["layout"] = "single" if len(shards) == 1 else "multi"

    weight_map = (view["index"] or {}).get("weight_map", {})
    wanted = {}  # type: dict[str, list[str]]
    for tname, shard in weight_map.items():
        wanted.setdefault(shard, []).append(tname)
    seen_in = {}  # type: dict[str, list[str]]
    for shard in shards:
        shard_path = os.path.join(folder, shard)
        entry = {"size": None, "tensors": None}  # type: dict[str, Any]
        view["files"][shard] = entry
        if not os.path.isfile(shard_path):
            names = sorted(wanted.get(shard, []))
            problems.append("%s: missing, but %s names it for %d tensor(s): %s"
                            % (shard, INDEX_NAME, len(names), _names(names)))
            continue
        size, tensors, file_problems = _read_header(shard_path, shard)
        entry["size"] = size
        entry["tensors"] = tensors
        problems.extend(file_problems)
        if tensors is None:
            continue
        absent = sorted(t for t in wanted.get(shard, []) if t not in tensors)
        if absent:
            problems.append("%s: %d tensor(s) that %s places in this file are not in its "
                            "header: %s" % (shard, len(absent), INDEX_NAME, _names(absent)))
        for tname in tensors:
            seen_in.setdefault(tname, []).append(shard)
    duplicated = sorted(t for t, where in seen_in.items() if len(where) > 1)
    if duplicated:
        problems.append("%d tensor(s) appear in more than one weights file: %s"
                        % (len(duplicated), _names(
                            "%s (%s)" % (t, ", ".join(seen_in[t])) for t in duplicated)))


def read_checkpoint(path):  # type: (str) -> dict[str, Any]
    """Read ``path`` (a checkpoint folder) into a JSON-serialisable view; never raises
    for bad input (problems are listed in ``view["problems"]``)."""
    view = {"path": str(path), "config": None, "index": None, "layout": None,
            "files": {}, "problems": []}  # type: dict[str, Any]
    try:
        _read_checkpoint(path, view)
    except Exception as exc:  # last resort: a reader bug must not kill the host agent
        view["problems"].append("%s: unexpected error while reading the checkpoint (%s: %s)"
                                % (view["path"], type(exc).__name__, _describe_error(exc)))
    return view


def main(argv=None):  # type: (list[str] | None) -> int
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: reader.py CHECKPOINT_DIR\n")
        return 2
    json.dump(read_checkpoint(argv[0]), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
