"""An empty file a git diff adds: git writes only its `diff --git` line
and `new file mode`, no `---`/`+++` and no hunk. It was dropped while the step said `changed`.
Through the real CLI and agent: the empty file is created with the other file's change, the
second apply is `ok`, status `applied`, rollback removes it and restores the other file."""

from __future__ import annotations

from pathlib import Path

from tests.agent.test_diff_apply_local import KIMI, SPEC, make_diff, write_recipe
from tests.helpers import Sandbox, sandbox_fixture, step  # noqa: F401 - the `sandbox` fixture

EMPTY = "toyllm/config/empty_marker.py"


def test_an_empty_file_added_by_a_git_diff_is_created_and_rolled_back(sandbox: Sandbox, tmp_path: Path) -> None:
    diff = (f"diff --git a/{EMPTY} b/{EMPTY}\nnew file mode 100644\nindex 0000000..e69de29\n"
            + make_diff(sandbox, {SPEC: KIMI}))
    before = sandbox.file(SPEC).read_bytes()
    assert not sandbox.file(EMPTY).exists()
    recipe = str(write_recipe(tmp_path, diff))

    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    done = step(applied, "upstream-fix")
    assert done["status"] == "changed", done
    assert len(done["files"] or []) == 2, done
    assert sandbox.file(EMPTY).read_bytes() == b""
    assert b'"kimi_k2"' in sandbox.file(SPEC).read_bytes()
    assert step(sandbox.run("apply", recipe, json_out=True), "upstream-fix")["status"] == "ok"
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "applied"

    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0, back
    assert not sandbox.file(EMPTY).exists()
    assert sandbox.file(SPEC).read_bytes() == before
