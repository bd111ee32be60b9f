"""The review outputs (`--html FILE`, `--markdown FILE|-`) of a real plan on two local hosts.

The page is opened in real headless Chromium (Debian's, driven by Playwright's Python client;
no browser download): nothing may run or load, the unified / side-by-side toggle works, the
hosts sharing a diff are named once, and a recipe and diff full of markup stay text. The
Markdown is parsed by a CommonMark parser (markdown-it-py) and its structure asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tests.helpers import Sandbox, make_sandbox, review_page_in_chromium, run_patchkit

HOSTILE = '<script>window.__pwned = 1</script><img src="http://127.0.0.1:9/x.png" onerror="window.__pwned = 2">'

RECIPE = f"""
name: review_me
description: {json.dumps("Reviewed " + HOSTILE)}
steps:
  - name: whitelist
    why: {json.dumps("because " + HOSTILE)}
    upstream: https://example.invalid/pr/1
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_insert:
          names: [eagle3_target_supported, aux_hidden_states_supported]
          within: SpeculativeConfig._verify_args
          values: [{json.dumps(HOSTILE)}, "kimi_k2"]
  - name: preflight
    check:
      package: toyllm
      python: print("checked")
  - name: missing
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_insert:
          names: [no_such_list]
          values: [x]
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Sandbox]]:
    root = tmp_path_factory.mktemp("review")
    hosts = [make_sandbox(root / name, packages=("toyllm",)) for name in ("a", "b")]
    inventory = root / "inventory.yaml"
    inventory.write_text("hosts:\n" + "".join(
        f"  gpu-{i + 1}: {{address: local, python: {json.dumps(str(h.python))}, state_dir: {json.dumps(str(h.state))}}}\n"
        for i, h in enumerate(hosts)))
    recipe = root / "review.yaml"
    recipe.write_text(RECIPE)
    return recipe, inventory, hosts


def _plan(fleet: tuple[Path, Path, list[Sandbox]], tmp_path: Path, *args: str) -> Any:
    recipe, inventory, _ = fleet
    return run_patchkit("plan", str(recipe), "-i", str(inventory), *args)


def test_the_page_runs_and_loads_nothing_and_its_toggle_works(fleet: Any, tmp_path: Path) -> None:
    page_file = tmp_path / "plan.html"
    result = _plan(fleet, tmp_path, "--html", str(page_file))
    assert result.returncode == 1, result  # the `missing` step fails on both hosts
    before = [h.file("toyllm/config/speculative.py").read_bytes() for h in fleet[2]]
    text = page_file.read_text()
    assert "<script" not in text and "onerror=" not in text.replace("onerror=&quot;", "")  # escaped, never markup
    with review_page_in_chromium(page_file, HOSTILE) as (page, problems):
        diff_heading = page.locator("h3.diff-hosts").first
        assert "gpu-1, gpu-2" in diff_heading.inner_text()  # one diff, shared by both hosts
        assert page.locator("h3.diff-hosts").count() == 1
        unified, split = page.locator(".unified").first, page.locator(".split").first
        assert unified.is_visible() and not split.is_visible()
        page.click("label[for=view-split]")
        assert split.is_visible() and not unified.is_visible()
        assert "kimi_k2" in split.inner_text()
        page.click("label[for=view-unified]")
        assert unified.is_visible() and not split.is_visible()

        attention = page.inner_text(".attention")
        assert "missing" in attention and "gpu-1" in attention and "gpu-2" in attention
        assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1  # no page-wide scroll on a phone
        page.screenshot(path=str(tmp_path / "plan.png"), full_page=True)
        assert (tmp_path / "plan.png").stat().st_size > 10_000
    assert [h.file("toyllm/config/speculative.py").read_bytes() for h in fleet[2]] == before  # a plan writes nothing


def test_the_markdown_has_a_details_block_per_step_and_the_diff_once(fleet: Any, tmp_path: Path) -> None:
    result = _plan(fleet, tmp_path, "--markdown", "-")
    assert result.returncode == 1, result
    tokens = MarkdownIt("commonmark").parse(result.stdout)
    blocks = [t.content for t in tokens if t.type == "html_block"]
    assert sum(b.count("<details>") for b in blocks) == 3
    assert sum(b.count("</details>") for b in blocks) == 3
    diffs = [t for t in tokens if t.type == "fence" and t.info == "diff"]
    assert len(diffs) == 1 and "+" in diffs[0].content and "kimi_k2" in diffs[0].content
    for token in tokens:  # user text never becomes markup: only our own tags are HTML
        if token.type in ("html_block", "html_inline"):
            assert "script" not in token.content and "onerror" not in token.content, token
        for child in token.children or []:
            if child.type == "html_inline":
                assert child.content in ("<b>", "</b>"), child
    rendered = MarkdownIt("commonmark").render(result.stdout)
    assert "<script" not in rendered and "<img" not in rendered
    assert "gpu-1, gpu-2" in result.stdout


def test_review_outputs_are_checked_before_any_host_is_contacted(fleet: Any, tmp_path: Path) -> None:
    result = _plan(fleet, tmp_path, "--html", str(tmp_path / "no" / "such" / "plan.html"))
    assert result.returncode == 2 and "--html" in result.stderr and "no folder" in result.stderr, result
    result = _plan(fleet, tmp_path, "--markdown", "-", "--json")
    assert result.returncode == 2 and "stdout" in result.stderr, result


# ------------------------------------------------------------ what a reviewer cannot see, and output paths

RLO, LRI, PDI = "\u202e", "\u2066", "\u2069"
TROJAN_RECIPE = f"""
name: trojan
description: {json.dumps("harmless " + RLO + "txt.exe")}
steps:
  - name: whitelist
    why: {json.dumps("cc @octo-org/security-team, see https://example.invalid/pr/1 " + LRI + "x" + PDI)}
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_insert:
          names: [eagle3_target_supported, aux_hidden_states_supported]
          within: SpeculativeConfig._verify_args
          values: [kimi_k2]
"""


def test_hidden_characters_are_shown_and_warned_about_in_the_page_the_markdown_and_the_terminal(
        tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path / "host", packages=("toyllm",))
    target = sandbox.file("toyllm/config/speculative.py")  # a line beside the edit the eye reads otherwise
    target.write_text(target.read_text().replace('"afmoe",', f'"afmoe",  # {RLO}"kimi_k2" stays out{PDI}', 1))
    before = target.read_bytes()
    recipe = tmp_path / "trojan.yaml"
    recipe.write_text(TROJAN_RECIPE)
    page_file, md_file = tmp_path / "plan.html", tmp_path / "plan.md"
    result = run_patchkit("plan", str(recipe), "-i", str(sandbox.inventory), "--html", str(page_file),
                          "--markdown", str(md_file))
    assert result.returncode == 0, result
    hidden = (RLO, LRI, PDI)
    # the terminal (here a pipe): the warning first, each character shown, none raw
    first = result.stdout.splitlines()[0]
    assert first.startswith("# warning: this plan contains ") and "hidden or bidirectional" in first, result
    assert '# <U+202E>"kimi_k2" stays out<U+2069>' in result.stdout and not any(c in result.stdout for c in hidden)
    # the page, in a real browser: the warning is the first thing on it, the diff shows the marks
    assert not any(c in page_file.read_text() for c in hidden)
    with review_page_in_chromium(page_file, '<U+202E>"kimi_k2" stays out<U+2069>') as (page, _):
        warning = page.locator(".hidden-chars")
        assert warning.is_visible() and "hidden or bidirectional control characters" in warning.inner_text()
        assert page.evaluate("document.querySelector('main').children[1].classList.contains('hidden-chars')")
        assert "harmless <U+202E>txt.exe" in page.inner_text("body")
        assert page.locator(".unified .hidden-char").count() >= 1
    # the Markdown: a warning alert first, no raw character, the mention and the link as code
    text = md_file.read_text()
    assert text.splitlines()[2] == "> [!WARNING]" and not any(c in text for c in hidden)
    tokens = MarkdownIt("commonmark").parse(text)
    prose = " ".join(c.content for t in tokens for c in t.children or [] if c.type == "text")
    code = [c.content for t in tokens for c in t.children or [] if c.type == "code_inline"]
    assert "@octo-org/security-team" in code and "https://example.invalid/pr/1" in code
    assert "@" not in prose and "://" not in prose
    assert target.read_bytes() == before  # a plan writes nothing


@pytest.mark.parametrize(("flag", "path", "why"), [
    ("--html", "/", "names a folder"),
    ("--html", "{tmp}", "is a folder"),
    ("--markdown", "{tmp}/link.md", "is a symlink (to {tmp}/victim.py): patchkit does not write through a symlink"),
    ("--html", "/proc/plan.html", "cannot write in /proc"),
    ("--markdown", "/dev/null", "not a regular file"),
    ("--html", "", "--html '': an empty value"),  # the CLI refuses any empty value first
])
def test_an_output_path_that_cannot_be_written_stops_the_run_before_any_host(
        tmp_path: Path, flag: str, path: str, why: str) -> None:
    sandbox = make_sandbox(tmp_path / "host", packages=("toyllm",))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    victim = tmp_path / "victim.py"
    victim.write_text("SAFE = True\n")
    (tmp_path / "link.md").symlink_to(victim)
    result = run_patchkit("plan", str(recipe), "-i", str(sandbox.inventory), "-e", f"python={sandbox.spy_python}",
                          flag, path.format(tmp=tmp_path))
    assert result.returncode == 2, result
    assert why.format(tmp=tmp_path) in result.stderr and result.stderr.count("\n") == 1, result  # one line
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not sandbox.contacted.exists()  # no host was started
    assert victim.read_text() == "SAFE = True\n" and (tmp_path / "link.md").is_symlink()


def test_a_report_replaces_the_file_at_its_path_whole(fleet: Any, tmp_path: Path) -> None:
    page_file = tmp_path / "plan.html"
    page_file.write_text("an older report\n")
    inode = page_file.stat().st_ino
    result = _plan(fleet, tmp_path, "--html", str(page_file), "--markdown", str(tmp_path / "plan.md"))
    assert result.returncode == 1, result  # the `missing` step fails on both hosts: the report is still written
    assert page_file.read_text().startswith("<!DOCTYPE html>") and page_file.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.html", "plan.md"]  # no temporary file left


def test_a_report_that_cannot_be_written_after_the_run_is_one_line_and_fails_the_run(tmp_path: Path) -> None:
    """The folder checked before the run is gone when the report is written (removed by the
    target interpreter as it starts): the run's own report is still printed, then one line, exit 1."""
    sandbox = make_sandbox(tmp_path / "host", packages=("toyllm",))
    out = tmp_path / "out"
    out.mkdir()
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nrm -rf "{out}"\nexec "{sandbox.python}" "$@"\n')
    python.chmod(0o755)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TROJAN_RECIPE)
    result = run_patchkit("plan", str(recipe), "-i", str(sandbox.inventory), "-e", f"python={python}",
                          "--html", str(out / "plan.html"))
    assert result.returncode == 1, result  # the plan itself succeeded
    assert result.stderr.splitlines()[-1] == f"patchkit: --html {out / 'plan.html'}: no folder {out} to write it in", result
    assert "Traceback" not in result.stderr and "local\twhitelist\tchanged" in result.stdout
    assert not out.exists()
