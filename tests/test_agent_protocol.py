"""The agent protocol: pipelined requests, optional agent files sent on first use, version lines.

These run the real host agent in a local subprocess (the LocalTransport), as every run does.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from patchkit.agent import AgentClient
from patchkit.agent.client import AGENT_EXTENSIONS, agent_source
from patchkit.errors import HostError
from patchkit.journal import Journal
from patchkit.results import RunRecord
from patchkit.transport import LocalTransport


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
        pending = [await agent.send("read", path=str(path)) for path in files.values()]
        answers = [await p.result() for p in reversed(pending)]  # last first: earlier replies are kept
        again = await pending[0].result()  # an answer can be asked for twice
        return [a["sha256"] for a in answers] + [again["sha256"]]

    got = with_agent(work)
    want = [hashlib.sha256(p.read_bytes()).hexdigest() for p in files.values()]
    assert got == list(reversed(want)) + [want[0]]


def test_a_patch_run_sends_only_the_agent_core_and_a_deploy_op_brings_its_files(tmp_path: Path) -> None:
    async def work(agent: AgentClient) -> tuple[int, int, dict, int]:
        await agent.call("read", path=str(tmp_path / "missing.py"))
        before = len(agent._extensions)
        manifest = await agent.call("manifest", dest=str(tmp_path / "dest"), cache_file=str(tmp_path / "c.json"))
        after_deploy = len(agent._extensions)
        await agent.call("log_tail", path=str(tmp_path / "no.log"))
        return before, after_deploy, manifest, len(agent._extensions)

    before, after_deploy, manifest, after_launch = with_agent(work)
    names = [name for _, name in AGENT_EXTENSIONS]
    assert before == 0
    assert after_deploy == names.index("transfer.py") + 1  # the checkpoint reader goes along: transfer uses it
    assert after_launch == len(names)
    assert isinstance(manifest, dict)
    assert b"def op_manifest" not in agent_source() and b"def op_read" in agent_source()


def test_an_unknown_op_is_a_readable_error_and_the_agent_goes_on() -> None:
    async def work(agent: AgentClient) -> dict:
        with pytest.raises(HostError, match="no op 'frobnicate'"):
            await agent.call("frobnicate")
        return await agent.call("hello")

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
            await agent.call("apply", path=str(target), expected_sha256=sha256_hex(target), content_b64="eCA9IDIK",
                             backup_path=str(tmp_path / "b" / "r1" / "module.py"), verify_imports=[],
                             import_timeout_s=5)
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
        return await agent.call("locate", package="pkg", modules=[])

    located = with_agent(work)
    assert located["found"] and located["version"] == version
