"""Where `-i` inventories come from, and how several of them become one.

An inventory is patchkit's own YAML, or anything Ansible reads. Which one a path is:

- a file whose top level has `hosts:`, `groups:` or `defaults:` (YAML or JSON) is patchkit's,
  and is read (and its errors reported) as such; so is one with a near miss (`host:`), for its
  "did you mean", unless it has Ansible's `all:`;
- a JSON file with `_meta` is what `ansible-inventory --list` prints: mapped directly
  (ansible_inventory.py), no Ansible needed;
- anything else (an INI file, an Ansible YAML inventory with `all:`/group names at the top, a
  folder with group_vars/ and host_vars/, an executable inventory script) is given to
  `ansible-inventory --list`, found beside this Python (where pip put patchkit's scripts) or
  on PATH, and its JSON mapped.

Several `-i` merge in order: a host in two inventories takes the later one's entry whole
(with -v, each such conflict is named); groups of the same name gather their members; each
inventory's `defaults` and group variables apply to its own hosts; a later `serial` wins.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit.base.errors import UsageError
from patchkit.fleet.inventory import RESOLVED, Defaults, HostSpec, Inventory, Resolved, members_of
from patchkit.base.yamlsource import parse_yaml

PATCHKIT_KEYS = ("hosts", "groups", "defaults")
ANSIBLE_INVENTORY_TIMEOUT_S = 120.0  # a dynamic inventory script may ask a cloud API
_PATCHKIT_TOP = re.compile(r"^(hosts|groups|defaults)[ \t]*:", re.MULTILINE)
_PATCHKIT_FLOW = re.compile(r"""\s*\{\s*["']?(hosts|groups|defaults)["']?\s*:""")
_TOP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:", re.MULTILINE)
_STDERR_TAIL = 20
MAX_INVENTORY_BYTES = 64 << 20  # the JSON of a fleet of ~100,000 hosts; anything larger is refused unread
MAX_JSON_DEPTH = 100  # nesting of objects and lists in an inventory's JSON


@dataclass
class LoadedInventory:
    inventory: Inventory
    notes: list[str] = field(default_factory=list)  # shown with -v: conflicts, Ansible settings unused
    sources: dict[str, str] = field(default_factory=dict)  # host -> the -i it came from
    ansible: set[str] = field(default_factory=set)  # hosts read from an Ansible inventory


def load_inventories(paths: list[str]) -> LoadedInventory:
    """Every `-i`, read and merged in order (module docstring)."""
    loaded = []
    ansible: set[str] = set()
    for path in paths:
        inventory, notes, from_ansible = read_inventory(path)
        loaded.append((path, inventory, notes))
        if from_ansible:
            ansible |= set(inventory.hosts)
        else:
            ansible -= set(inventory.hosts)
    merged = merge(loaded)
    merged.ansible = ansible
    return merged


def read_inventory(path: str) -> tuple[Inventory, list[str], bool]:
    """One `-i`: patchkit's YAML, the JSON of `ansible-inventory --list`, or Ansible's (run).

    A file is read once, at most MAX_INVENTORY_BYTES: a pipe (`-i <(script)`, `-i /dev/stdin`)
    has no second reading, and a device without end (`/dev/zero`) must not fill the memory."""
    if not path:  # `-i "$INV"` with INV unset: never the current folder
        raise UsageError("-i '': an empty path (an unset variable?): name an inventory file or folder")
    where = Path(path)
    try:
        if where.is_dir():
            return _from_ansible(path)
        with where.open("rb") as stream:
            regular = stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
            raw = stream.read(MAX_INVENTORY_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"-i {path}: no such file or folder") from None
    except OSError as exc:
        raise UsageError(f"-i {path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_INVENTORY_BYTES:
        raise UsageError(f"-i {path}: larger than {MAX_INVENTORY_BYTES >> 20} MiB: not read (the limit for an inventory)")
    text = raw.decode("utf-8", errors="replace")
    if text.startswith("#!") and regular and os.access(where, os.X_OK):  # a dynamic inventory script
        return _from_ansible(path)
    if _PATCHKIT_FLOW.match(text):  # `{"hosts": ...}` or `{hosts: ...}`: patchkit's, JSON or flow YAML
        return _patchkit(path, raw), [], False
    if text.lstrip().startswith("{"):
        data = _json(text, path)
        if isinstance(data, dict) and "_meta" in data:
            from patchkit.fleet.ansible import hosts_from_ansible_json

            mapped = hosts_from_ansible_json(data, path)
            return mapped.inventory, mapped.notes, True
        if isinstance(data, dict) and set(data) & set(PATCHKIT_KEYS):
            return _patchkit(path, raw), [], False
    elif _PATCHKIT_TOP.search(text) or _misspelt_patchkit(text):
        return _patchkit(path, raw), [], False
    if regular:  # Ansible reads the file itself: group_vars/ and host_vars/ beside it count
        return _from_ansible(path)
    with tempfile.TemporaryDirectory(prefix="patchkit-inventory-") as folder:  # what was read, for Ansible
        copy = Path(folder) / "inventory"
        copy.write_bytes(raw)
        return _from_ansible(path, str(copy))


def _json(text: str, path: str, printed_by: str | None = None) -> Any:
    """JSON of an inventory (or what `printed_by` printed for it), nested at most MAX_JSON_DEPTH
    levels: deeper is no real inventory, and would exhaust the stack of whatever walks it."""
    where = f"-i {path}: {printed_by}'s JSON" if printed_by else path
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if printed_by:
            raise UsageError(f"-i {path}: {printed_by} printed no JSON ({exc})") from None
        raise UsageError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        data = None
    else:
        todo: list[tuple[Any, int]] = [(data, 1)]
        while todo:
            value, depth = todo.pop()
            if depth > MAX_JSON_DEPTH:
                break
            children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
            todo.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
        else:
            return data
    raise UsageError(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels: not read")


def _misspelt_patchkit(text: str) -> bool:
    """Top-level keys like `host:` or `default:`: patchkit's, misspelt (its loader then says
    "did you mean 'hosts'?"), not an Ansible group of that name. `all:` is Ansible's."""
    keys = _TOP_KEY.findall(text)
    return "all" not in keys and any(difflib.get_close_matches(k, PATCHKIT_KEYS, n=1, cutoff=0.8) for k in keys)


def _patchkit(path: str, raw: bytes) -> Inventory:
    loaded = parse_yaml(path, raw).build()
    return loaded.validate(Inventory.model_validate)


def ansible_inventory_command() -> str | None:
    """`ansible-inventory` beside the running interpreter (a venv's bin/), else on PATH."""
    beside = Path(sys.executable).parent / "ansible-inventory"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("ansible-inventory")


def _from_ansible(path: str, source: str | None = None) -> tuple[Inventory, list[str], bool]:
    """`path` read by `ansible-inventory --list` (`source`: a copy of what a pipe gave)."""
    from patchkit.fleet.ansible import hosts_from_ansible_json

    command = ansible_inventory_command()
    if command is None:
        raise UsageError(f"-i {path}: not a patchkit inventory (no top-level hosts:, groups: or defaults:), and "
                         f"ansible-inventory is not installed (neither beside {sys.executable} nor on PATH) to read "
                         "it as Ansible's; install ansible-core, or give the JSON of `ansible-inventory -i "
                         f"{path} --list` as a file")
    # One word per value (--inventory=PATH): a path is never read as an option. An inventory
    # Ansible cannot parse is an error, not a warning and an empty list.
    argv = [command, "--list", f"--inventory={os.path.abspath(source or path)}"]
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_NOCOLOR": "True",
           "ANSIBLE_FORCE_COLOR": "False"}
    try:
        returncode, stdout, stderr = _run_bounded(argv, env, ANSIBLE_INVENTORY_TIMEOUT_S, MAX_INVENTORY_BYTES)
    except subprocess.TimeoutExpired:
        raise UsageError(f"-i {path}: ansible-inventory did not answer within {ANSIBLE_INVENTORY_TIMEOUT_S:.0f} s "
                         "(an inventory script that hangs?)") from None
    except OSError as exc:
        raise UsageError(f"-i {path}: cannot run {command}: {exc.strerror or exc}") from None
    if returncode is None:
        raise UsageError(f"-i {path}: ansible-inventory printed more than {MAX_INVENTORY_BYTES >> 20} MiB: stopped, "
                         "not read (the limit for an inventory)")
    if returncode != 0:
        lines = stderr.decode("utf-8", "replace").strip().splitlines()
        tail = "\n".join(line for line in lines[-_STDERR_TAIL:] if line.strip())
        raise UsageError(f"-i {path}: ansible-inventory could not read it (exit {returncode}):\n{tail}")
    data = _json(stdout.decode("utf-8", "replace"), path, "ansible-inventory")
    mapped = hosts_from_ansible_json(data, path)
    return mapped.inventory, mapped.notes, True


def _run_bounded(argv: list[str], env: dict[str, str], timeout_s: float,
                 limit: int) -> tuple[int | None, bytes, bytes]:
    """argv's exit code, its stdout and the end of its stderr; exit code None when stdout passed
    `limit` bytes (its process group is then killed, as at the timeout: TimeoutExpired)."""
    import selectors
    import signal
    import time

    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)  # an inventory script it starts goes with it
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s
    with proc, selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            selector.register(stream, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout_s)
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is proc.stdout:
                        out += chunk
                        if len(out) > limit:
                            return None, b"", b""
                    else:
                        err = (err + chunk)[-(1 << 16):]  # the tail is what is shown
            return proc.wait(max(0.0, deadline - time.monotonic())), bytes(out), bytes(err)
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait()


def merge(loaded: list[tuple[str, Inventory, list[str]]]) -> LoadedInventory:
    """The inventories as one, in order: a later host entry wins (noted); groups gather members."""
    if len(loaded) == 1:
        path, inventory, own = loaded[0]
        return LoadedInventory(inventory, list(own), {name: path for name in inventory.hosts})
    hosts: dict[str, HostSpec] = {}
    origin: dict[str, str] = {}
    groups: dict[str, list[str] | Resolved] = {}
    group_origin: dict[str, str] = {}
    selector_defaults: dict[str, Defaults] = {}
    serial = None
    notes: list[str] = []
    for path, inventory, found_notes in loaded:
        notes.extend(found_notes)
        for name, spec in inventory.resolved().items():
            if name in hosts and hosts[name] != spec:
                notes.append(f"host {name} is in -i {origin[name]} and -i {path}: the later entry wins "
                             f"({_difference(hosts[name], spec)})")
            hosts[name], origin[name] = spec, path
        for name, members in inventory.groups.items():
            if isinstance(members, RESOLVED) or isinstance(groups.get(name), RESOLVED):
                if name in groups:
                    raise UsageError(f"group {name!r} is in -i {group_origin[name]} and -i {path}, and one of them "
                                     "is resolved at run time (k8s_selector, ray): such a group is defined once")
                groups[name] = members if isinstance(members, RESOLVED) else list(members_of(members))
                if isinstance(members, RESOLVED):
                    selector_defaults[name] = inventory.defaults
            else:
                known = groups.setdefault(name, [])
                assert isinstance(known, list)
                known.extend(m for m in members_of(members) if m not in known)
            group_origin.setdefault(name, path)
        if inventory.serial is not None:
            serial = inventory.serial
    clash = sorted(set(hosts) & set(groups))
    if clash:
        raise UsageError(f"{clash[0]!r} is a host in -i {origin[clash[0]]} and a group in -i {group_origin[clash[0]]}")
    merged = Inventory.model_validate({"hosts": hosts, "groups": groups, "serial": serial})
    merged._selector_defaults = selector_defaults
    return LoadedInventory(merged, notes, origin)


def _difference(before: HostSpec, after: HostSpec) -> str:
    old, new = before.settings(), after.settings()
    changed = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in new if old.get(k) != new[k] and k != "name"]
    return ", ".join(changed) or "the same settings"

