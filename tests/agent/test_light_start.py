"""A command imports only what it uses: the real CLI on a local host, its modules
read from sys.modules when it exits.

libcst loads only when an edit is computed (not when the edit cache serves it); asyncssh
never for a local host. And a run's first reads ride with the agent's start: hello, the
lock, the journal listing and the first step's locate leave in one write.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import Sandbox, recipe, sandbox_fixture  # noqa: F401

# Runs the CLI in this interpreter, then writes the imported top-level packages to a file.
RUN_AND_LIST = """
import json, sys
from patchkit.cli.main import main
try:
    main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as f:
        json.dump(sorted({m.split(".")[0] for m in sys.modules}), f)
"""


def imported_by(tmp_path: Path, sandbox: Sandbox, command: str, name: str) -> tuple[set[str], int]:
    """Top-level packages the CLI imported for `patchkit COMMAND toyllm_eagle3.yaml` on the sandbox."""
    listing = tmp_path / f"{name}.json"
    env = {**os.environ, "PATCHKIT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", RUN_AND_LIST, str(listing),
                           *sandbox.argv(command, recipe("toyllm_eagle3.yaml"), "--json")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert listing.exists(), proc.stderr
    return set(json.loads(listing.read_text())), proc.returncode


def test_plan_and_status_on_a_local_host_import_neither_libcst_nor_asyncssh(tmp_path: Path, sandbox: Sandbox) -> None:
    first, code = imported_by(tmp_path, sandbox, "plan", "first-plan")
    assert code == 0
    assert "libcst" in first  # the edit was computed (empty cache): the check can see libcst
    assert "asyncssh" not in first and "cryptography" not in first
    for command in ("plan", "status"):
        modules, code = imported_by(tmp_path, sandbox, command, f"cached-{command}")
        assert code in (0, 3), command  # status: pending
        assert "libcst" not in modules, f"{command} imported libcst though the edit cache had the edit"
        assert "asyncssh" not in modules and "cryptography" not in modules, command
        assert "patchkit" in modules and "pydantic" in modules  # the listing is of the real run


def test_validate_starts_no_ssh_helper(tmp_path: Path, sandbox: Sandbox) -> None:
    """`validate` (with an inventory, too) contacts nothing: the SSH helper (its module and what
    it imports, ~5 ms, and the fork) is for the commands that reach hosts."""
    listing = tmp_path / "validate.json"
    script = RUN_AND_LIST.replace("m.split(\".\")[0] for m in sys.modules", "m for m in sys.modules")
    proc = subprocess.run([sys.executable, "-c", script, str(listing),
                           *sandbox.argv("validate", recipe("toyllm_eagle3.yaml"))],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(listing.read_text()))
    assert "patchkit.recipe.model" in modules  # the listing is of the real run
    assert "patchkit.host.transport.sshhelper" not in modules


def test_the_start_and_the_first_reads_go_out_in_one_write(tmp_path: Path, sandbox: Sandbox) -> None:
    """A local transport whose stdin counts writes: before the first reply is read, one write
    holds the bootstrap's source, hello, lock, the journal listing and the step's locate."""
    script = tmp_path / "count_writes.py"
    script.write_text(COUNT_WRITES)
    env = {**os.environ, "PATCHKIT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(script), *sandbox.argv("apply", recipe("toyllm_eagle3.yaml"), "--json",
                                                                    "--steps", "eagle3-whitelist")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    writes = json.loads(proc.stderr.strip().splitlines()[-1])
    first = writes[0]
    assert first["before_first_reply"], writes
    assert first["ops"][:4] == ["hello", "lock", "journal_list", "locate"], writes
    assert sum(1 for w in writes if w["before_first_reply"]) == 1, writes
    # and the plan's own locate was answered by that early one: no second locate
    assert [op for w in writes for op in w["ops"]].count("locate") == 1, writes
    report = json.loads(proc.stdout)
    assert report["hosts"]["local"]["steps"][0]["status"] == "changed"


# The ops of the request lines in bytes written to the agent (both counting programs below).
OPS_OF = """
def ops_of(data):
    out = []
    for line in bytes(data).split(b"\\n"):
        if line.startswith(b'{"id"'):
            try:
                out.append(json.loads(line)["op"])
            except ValueError:
                pass
    return out
"""

# Wraps the local transport's stdin: records, per write, the ops it carries and whether any
# reply had been read by then; prints the list on stderr at exit. The CLI runs unchanged.
COUNT_WRITES = """
import atexit, json, sys
from patchkit.host.agent import client
from patchkit.host.transport import local

WRITES, READ = [], []

""" + OPS_OF + """
real_spawn = local.LocalTransport.spawn

async def spawn(self, argv):
    streams = await real_spawn(self, argv)
    stdin, stdout = streams.stdin, streams.stdout
    real_write, real_readline = stdin.write, stdout.readline

    def write(data):
        WRITES.append({"ops": ops_of(data), "before_first_reply": not READ})
        return real_write(data)

    async def readline():
        line = await real_readline()
        if line.startswith(b'{"id"'):
            READ.append(1)
        return line

    stdin.write, stdout.readline = write, readline
    return streams

local.LocalTransport.spawn = spawn
atexit.register(lambda: print(json.dumps(WRITES), file=sys.stderr))
from patchkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def rounds_of(tmp_path: Path, argv: list[str], transport: str = "local", in_command: bool = True,
              env: dict[str, str] | None = None) -> tuple[list[list[str]], subprocess.CompletedProcess[str]]:
    """The agent's requests of one CLI run, in rounds: a round is what the control side sent
    before it read a reply (round 1: what the agent's command line and first write carry).
    `transport`: "local" (made to take its start in the command line when `in_command`) or "ssh"."""
    script = tmp_path / "count_rounds.py"
    script.write_text(COUNT_ROUNDS.replace("TRANSPORT", transport).replace("IN_COMMAND", str(in_command)))
    proc = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True,
                          env=env or {**os.environ, "PATCHKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=120,
                          check=False)
    assert proc.stderr.strip(), proc
    return json.loads(proc.stderr.strip().splitlines()[-1]), proc


def test_a_start_in_the_command_line_and_the_apply_in_three_rounds(tmp_path: Path, sandbox: Sandbox) -> None:
    """A transport whose stdin costs a round trip (start_in_command, as SSH): the agent's start
    and the first reads ride in its command line, nothing is written before the first reply; a
    fresh apply then costs 2 more rounds (the change; its records, the prune and `end`, after
    which nothing is sent), a no-op 1."""
    argv = sandbox.argv("apply", recipe("toyllm_eagle3.yaml"), "--json", "--steps", "eagle3-whitelist")
    fresh, proc = rounds_of(tmp_path, argv)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hosts"]["local"]["steps"][0]["status"] == "changed"
    assert fresh[0][:5] == ["command line", "hello", "lock", "journal_list", "locate"], fresh
    assert "stdin" not in fresh[0], fresh  # nothing on stdin before the first reply
    assert len(fresh) == 3, fresh
    assert "apply_files" in fresh[1] and fresh[2][-1] == "end" and fresh[2].count("journal_write") == 2, fresh

    noop, proc = rounds_of(tmp_path, argv)
    assert proc.returncode == 0, proc.stderr
    assert len(noop) == 2 and noop[1] == ["stdin", "journal_write", "end"], noop

    # without the ability, as the local transport is: the start goes on stdin, in one write
    plain, proc = rounds_of(tmp_path, argv, in_command=False)
    assert proc.returncode == 0, proc.stderr
    assert plain[0][:5] == ["stdin", "hello", "lock", "journal_list", "locate"] and len(plain) == 2, plain


# Wraps the transport's spawn and streams: records the ops of the agent's command line and of
# each stdin write, and starts a new round at the first write after a reply was read; prints
# the rounds on stderr at exit. The CLI runs unchanged.
COUNT_ROUNDS = """
import atexit, base64, json, sys, zlib
from patchkit.host.transport import local, ssh, sshhelper

ROUNDS, STATE = [], {"replied": True}

""" + OPS_OF + """
def note(where, ops):
    if STATE["replied"]:
        ROUNDS.append([])
        STATE["replied"] = False
    if where not in ROUNDS[-1]:
        ROUNDS[-1].append(where)
    ROUNDS[-1].extend(ops)

def counted(real_spawn):
  async def spawn(self, argv):
      if len(argv) > 4:  # the start in the command line: nonce, source, requests (client.agent_argv)
          note("command line", ops_of(zlib.decompress(base64.b64decode(argv[-1]))))
      streams = await real_spawn(self, argv)
      stdin, stdout = streams.stdin, streams.stdout
      real_write, real_readline = stdin.write, stdout.readline

      def write(data):
          note("stdin", ops_of(data))
          return real_write(data)

      async def readline():
          line = await real_readline()
          if line.startswith(b'{"id"'):
              STATE["replied"] = True
          return line

      stdin.write, stdout.readline = write, readline
      return streams
  return spawn

# SSH: in this process (PATCHKIT_SSH_HELPER=0) or through the helper process (the default)
classes = {"local": [local.LocalTransport], "ssh": [ssh.SSHTransport, sshhelper.HelperTransport]}["TRANSPORT"]
for cls in classes:
    if "TRANSPORT" == "local":
        cls.start_in_command = IN_COMMAND
    cls.spawn = counted(cls.spawn)
atexit.register(lambda: print(json.dumps(ROUNDS), file=sys.stderr))
from patchkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
