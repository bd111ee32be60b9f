"""The agent protocol: pipelined requests, optional agent files sent on first use, version lines,
and its framing (output that is not the agent's is skipped and reported).

These run the real host agent in a local subprocess (the LocalTransport), as every run does;
the framing tests also drive the client with FakeStreams (scripted pipes, no process).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from patchkit.host.agent.client import AgentClient
from patchkit.host.agent.client import SKIP_LIMIT, START_MARK, agent_source
from patchkit.host.agent.protocol import APPLY_FILES, HELLO, LOCATE, LOG_TAIL, MANIFEST, READ, Request
from patchkit.base.errors import HostError
from patchkit.run.journal import Journal
from patchkit.run.results import RunRecord
from patchkit.host.transport.local import LocalTransport


def with_agent(work: Callable[[AgentClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        transport = LocalTransport()
        agent = await AgentClient.start(transport, sys.executable, "local")
        try:
            await agent.started(sys.executable)
            return await work(agent)
        finally:
            await agent.close()

    return asyncio.run(main())


def test_pipelined_requests_get_their_own_answers_in_any_await_order(tmp_path: Path) -> None:
    files = {name: tmp_path / name for name in ("a.py", "b.py", "c.py")}
    for name, path in files.items():
        path.write_text(f"# {name}\n")

    async def work(agent: AgentClient) -> list[str]:
        pending = [await agent.send(READ({"path": str(path)})) for path in files.values()]
        answers = [await p.result() for p in reversed(pending)]  # last first: earlier replies are kept
        again = await pending[0].result()  # an answer can be asked for twice
        return [a["sha256"] for a in answers] + [again["sha256"]]

    got = with_agent(work)
    want = [hashlib.sha256(p.read_bytes()).hexdigest() for p in files.values()]
    assert got == list(reversed(want)) + [want[0]]


def test_a_patch_run_sends_only_the_agent_core_and_a_deploy_op_brings_its_files(tmp_path: Path) -> None:
    async def work(agent: AgentClient) -> tuple[set[str], set[str], dict, set[str]]:
        await agent.call(READ({"path": str(tmp_path / "missing.py")}))
        before = set(agent._extensions)
        manifest = await agent.call(MANIFEST({"dest": str(tmp_path / "dest"), "cache_file": str(tmp_path / "c.json")}))
        after_deploy = set(agent._extensions)
        await agent.call(LOG_TAIL({"path": str(tmp_path / "no.log")}))
        await agent.call(MANIFEST({"dest": str(tmp_path / "dest"), "cache_file": str(tmp_path / "c.json")}))
        return before, after_deploy, manifest, set(agent._extensions)

    before, after_deploy, manifest, after_launch = with_agent(work)
    assert before == set()
    assert after_deploy == {"transfer"}  # only the file that declares the op: extensions stand alone
    assert after_launch == {"transfer", "processes"}  # each sent once
    assert isinstance(manifest, dict)
    assert b"def op_manifest" not in agent_source() and b"def op_read" in agent_source()


def test_an_unknown_op_is_a_readable_error_and_the_agent_goes_on() -> None:
    async def work(agent: AgentClient) -> dict:
        with pytest.raises(HostError, match="no op 'frobnicate'"):
            # an op no host file declares, as a bare request: an `Op` would join the registry of ops
            await agent.call(Request[Any]("frobnicate", {}))
        return await agent.call(HELLO({}))

    assert "python_version" in with_agent(work)


def sha256_hex(path: Path) -> str:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_journal_write_that_did_not_land_is_reported_at_the_next_flush(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "runs").write_text("a file where the journal's folder should be")
    record = RunRecord(run_id="r1", kind="apply", recipe="demo", recipe_sha256="0" * 64, host="local",
                       user="u", patchkit_version="0", started=0.0)

    async def work(agent: AgentClient) -> None:
        journal = Journal(agent, str(state))
        await journal.write(record, wait=False)  # returns before the host answers
        with pytest.raises(HostError, match="runs is not a folder; refusing to use it"):
            await journal.flush()
        # From then on the agent refuses to change the host in this run.
        target = tmp_path / "module.py"
        target.write_text("x = 1\n")
        with pytest.raises(HostError, match="a journal write of this run failed earlier"):
            await agent.call(APPLY_FILES({"files": [{
                "path": str(target), "expected_sha256": sha256_hex(target), "content_b64": "eCA9IDIK",
                "backup_path": str(tmp_path / "b" / "r1" / "module.py")}], "verify_imports": [], "import_timeout_s": 5}))
        assert target.read_text() == "x = 1\n"

    with_agent(work)


@pytest.mark.parametrize("text, version", [
    ("__version__ = version = '0.16.0'\n__version_tuple__ = version_tuple = (0, 16, 0)\n", "0.16.0"),
    ("version: str\n__version__: str\n__version__ = version = '0.11.0'\n", "0.11.0"),
    ('__version__ = "1.2.3"  # set by the release script\n', "1.2.3"),
    ('import os\n__version__: str = "2.0"\n', "2.0"),
    ('if True:\n    __version__ = "9"\n', None),  # not top level
    ("__version__ = compute()\n", None),
    ('__version__ = ("3" \n    "4")\n', "34"),  # no regex match: the syntax tree still finds it
    ("def broken(:\n", None),
])
def test_the_agent_reads_a_version_line_without_importing_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, version: str | None) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "_version.py").write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the local agent inherits it: locate finds pkg

    async def work(agent: AgentClient) -> Any:
        return await agent.call(LOCATE({"package": "pkg", "modules": []}))

    located = with_agent(work)
    assert located["found"] and located["version"] == version


# ---------------------------------------------------------------- framing: output that is not the agent's

NONCE = "f00dfeedf00dfeed"
MARK = START_MARK + NONCE.encode() + b"\n"


def reply(request_id: int, result: Any = None) -> bytes:
    return json.dumps({"id": request_id, "ok": True, "result": result}).encode() + b"\n"


class FakeStreams:
    """A fake of a transport's pipes, no process behind them: stdout plays `script` (then EOF,
    or nothing more: a hung host), stderr is `stderr`, and what the client writes is kept in `written`."""

    def __init__(self, script: bytes, stderr: str = "", eof: bool = True) -> None:
        self.stdout = asyncio.StreamReader()
        self.stdout.feed_data(script)
        if eof:
            self.stdout.feed_eof()
        self.stdin = self
        self.written = bytearray()
        self.stderr = stderr
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        return None

    async def error_tail(self) -> str:
        return "\n".join(self.stderr.splitlines()[-5:])

    async def stderr_text(self) -> str:
        return self.stderr

    async def close(self) -> None:
        self.closed = True


def with_fake(script: bytes, work: Callable[[AgentClient], Awaitable[Any]], stderr: str = "",
              eof: bool = True) -> tuple[Any, list[str]]:
    """Run `work` with a client on FakeStreams; returns its outcome (or the HostError) and the
    client's warnings after close."""
    async def main() -> tuple[Any, list[str]]:
        client = AgentClient(FakeStreams(script, stderr, eof), "gpu-fake", NONCE)  # type: ignore[arg-type]
        try:
            outcome = await work(client)
        except HostError as exc:
            outcome = exc
        await client.close()
        return outcome, client.warnings

    return asyncio.run(main())


def test_output_before_the_start_mark_is_skipped_and_reported_even_if_it_looks_like_a_reply() -> None:
    script = (b"Welcome to gpu-fake\n" + b'{"id": 1, "ok": true}\n'
              + START_MARK + b"0123456789abcdef\n"  # another start's mark is not this agent's
              + b"\n" + b"no final newline: " + MARK + reply(1, {"python": "the agent"}) + reply(2, "second"))

    async def work(agent: AgentClient) -> list[Any]:
        first = await agent.send(HELLO({}))
        return [await first.result(), await agent.call(READ({"path": "/x"}))]

    outcome, warnings = with_fake(script, work)
    assert outcome == [{"python": "the agent"}, "second"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("skipped 5 line(s) on stdout before the agent started"), warnings
    assert ("'Welcome to gpu-fake' | '{\"id\": 1, \"ok\": true}' | 'patchkit-agent-start 0123456789abcdef' (+2 more)"
            in warnings[0]), warnings


def test_a_line_that_is_not_a_reply_mid_session_is_an_error_naming_the_host() -> None:
    for junk in (b"Segmentation fault? no: a library printed this\n", b'{"no": "id"}\n', b"[1, 2]\n"):
        script = MARK + reply(1, "hello") + junk + reply(2, "lost")

        async def work(agent: AgentClient) -> list[str]:
            await agent.call(HELLO({}))
            errors = []
            for _ in range(2):  # the second request fails at once, with the same reason
                with pytest.raises(HostError) as caught:
                    await agent.call(READ({"path": "/x"}))
                errors.append(str(caught.value))
            return errors

        errors, _ = with_fake(script, work)
        shown = junk.decode().rstrip("\n")
        assert errors == 2 * [f"gpu-fake: the agent's output is not a reply (during read): {shown!r}; "
                              "something on the host writes into the agent's stdout"]


def test_an_agent_that_never_starts_says_what_the_host_printed_instead() -> None:
    script = b"This account is currently not available.\n"

    async def work(agent: AgentClient) -> Any:
        return await agent.call(HELLO({}))

    error, warnings = with_fake(script, work, stderr="")
    assert isinstance(error, HostError)
    assert str(error) == ("gpu-fake: agent exited during hello (the host printed only this on stdout: "
                          "'This account is currently not available.')")
    assert len(warnings) == 1 and "This account is currently not available." in warnings[0]

    async def impatient(agent: AgentClient) -> Any:
        return await agent.call(HELLO({}), reply_wait=0.3)

    error, _ = with_fake(b"Last login: never\n", impatient, eof=False)  # ... and then nothing: a hung host
    assert str(error) == "gpu-fake: no answer to hello within 0.3s (the host printed only this on stdout: 'Last login: never')"

    flood = (b"y" * 1023 + b"\n") * (SKIP_LIMIT // 1024 + 1)  # a login script that never stops: not read forever
    error, _ = with_fake(flood + MARK + reply(1), work)
    assert isinstance(error, HostError) and "no start mark from the agent after" in str(error), error


def test_what_is_left_after_the_last_reply_and_stderr_are_reported_at_close() -> None:
    script = MARK + reply(1, "hello") + reply(2, "never read") + b"bye from ~/.bash_logout\n" + reply(1, "again?")

    async def work(agent: AgentClient) -> None:
        await agent.call(HELLO({}))
        await agent.send(READ({"path": "/x"}))  # its reply is left unread: not stray output

    outcome, warnings = with_fake(script, work, stderr="banner on stderr\nDeprecationWarning: ...\n")
    assert outcome is None
    assert warnings == [
        "skipped 2 line(s) on stdout after the agent's last reply (not the agent's: a shell's EXIT trap, "
        "~/.bash_logout or a wrapper printing?): 'bye from ~/.bash_logout' | '{\"id\": 1, \"ok\": true, \"result\": \"again?\"}'",
        "skipped 2 line(s) on stderr of the agent's session (stderr is never read as replies): "
        "'banner on stderr' | 'DeprecationWarning: ...'",
    ]


def test_the_real_agent_writes_its_mark_behind_what_its_interpreter_printed(tmp_path: Path) -> None:
    """A .pth that prints at interpreter start (stdout and stderr) is what the local transport
    meets: the real agent, started with a fresh nonce, is read from behind its start mark."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "noisy.pth").write_text(
        'import sys; print(\'{"id": 1, "ok": true}\'); print("banner from a .pth"); sys.stderr.write("pth on stderr\\n")\n')
    python = str(venv / "bin" / "python")
    target = tmp_path / "a.py"
    target.write_text("# a\n")

    async def main() -> tuple[dict, dict, list[str]]:
        agent = await AgentClient.start(LocalTransport(), python, "local")
        try:
            info = await agent.started(python)
            read = await agent.call(READ({"path": str(target)}))
        finally:
            await agent.close()
        return info, read, agent.warnings

    info, read, warnings = asyncio.run(main())
    assert info["python"] == python and read["sha256"] == hashlib.sha256(b"# a\n").hexdigest()
    assert any("on stdout before the agent started" in w and "'{\"id\": 1, \"ok\": true}'" in w
               and "'banner from a .pth'" in w for w in warnings), warnings
    assert any("on stderr" in w and "'pth on stderr'" in w for w in warnings), warnings
