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
