"""The `diff` edit: unified diffs applied by meaning (golden tests, no host).

Each test builds a file, a diff made against one version of it, and a target that differs
from that version the way real releases do (a function moved, re-indented, CRLF, context
that exists twice), then asserts the exact text that comes out, or the refusal.
"""

from __future__ import annotations

import difflib
import textwrap
from pathlib import Path

import pytest

from patchkit.edits import Edit
from patchkit.edits.hunk_locate import apply_file_patch
from patchkit.edits.unified_diff import DiffError, parse_diff
from patchkit.recipe.model import load_recipe
from patchkit.base.errors import UsageError


def udiff(old: str, new: str, path: str = "pkg/mod.py", n: int = 3) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}", n=n))


def edit(diff: str, **extra: object) -> Edit:
    return Edit.model_validate({"diff": {"text": diff, **extra}})


ORIGINAL = textwrap.dedent('''\
    import os


    def helper():
        return 1


    def verify(kind):
        supported = ["llama", "qwen"]
        if kind not in supported:
            raise ValueError(kind)
        return True
    ''')
FIXED = ORIGINAL.replace('["llama", "qwen"]', '["llama", "qwen", "kimi_k2"]')
FIX = udiff(ORIGINAL, FIXED)


def test_applies_where_the_function_moved_by_hundreds_of_lines() -> None:
    filler = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(150))  # 600 lines
    target = ORIGINAL.replace("def verify", filler + "def verify")
    result = edit(FIX).apply(target)
    assert result.verdict == "changed"
    assert result.source == target.replace('["llama", "qwen"]', '["llama", "qwen", "kimi_k2"]')
    assert "hunk 1 at line 609 in verify" in result.message
    again = edit(FIX).apply(result.source)
    assert again.verdict == "already"


def test_reindents_to_where_it_was_found() -> None:
    as_method = "class Config:\n" + textwrap.indent(ORIGINAL.replace("import os\n", ""), "    ")
    as_method = "\n".join(line.rstrip() for line in as_method.split("\n"))
    diff = udiff(ORIGINAL, ORIGINAL.replace(
        '        raise ValueError(kind)\n', '        raise ValueError(kind)\n    if kind == "x":\n        return False\n'))
    result = edit(diff).apply(as_method)
    assert result.verdict == "changed", result.message
    assert '            raise ValueError(kind)\n        if kind == "x":\n            return False\n' \
           '        return True\n' in result.source
    assert result.source.count("\n") == as_method.count("\n") + 2


def test_crlf_file_keeps_its_line_endings() -> None:
    target = ORIGINAL.replace("\n", "\r\n")
    diff = udiff(ORIGINAL, ORIGINAL.replace("    return True\n", "    log(kind)\n    return True\n"))
    result = edit(diff).apply(target)
    assert result.verdict == "changed"
    assert result.source == target.replace("    return True\r\n", "    log(kind)\r\n    return True\r\n")
    assert "\n" not in result.source.replace("\r\n", "")


TWICE = ORIGINAL + "\n\nclass Again:\n" + textwrap.indent(ORIGINAL.split("\n\n\n")[2], "    ")
VERIFY = ORIGINAL.split("\n\n\n")[2]
FLAT_TWICE = "# moved down a line\n" + ORIGINAL + "\n\n" + VERIFY.replace("def verify", "def verify", 1)


def test_context_that_exists_twice_is_refused_naming_both() -> None:
    # the same lines at the same indentation twice, neither at the line the diff names
    result = edit(udiff(ORIGINAL, FIXED, n=1)).apply(FLAT_TWICE)
    assert result.verdict == "not_found"
    assert result.source == FLAT_TWICE
    assert "is ambiguous: its lines fit 2 places in the file" in result.message
    assert "1) line 9 in <module>: `def verify(kind):`" in result.message
    assert "2) line 16 in <module>: `def verify(kind):`" in result.message


def test_of_identical_places_the_one_at_the_header_line_is_taken() -> None:
    twice = ORIGINAL + "\n\n" + VERIFY  # the diff's own file, and a copy of the function below it
    result = edit(udiff(ORIGINAL, FIXED, n=1)).apply(twice)
    assert result.verdict == "changed", result.message
    assert result.source == FIXED + "\n\n" + VERIFY
    assert "exactly at the line its header names" in result.message


def test_a_re_indented_copy_does_not_make_it_ambiguous() -> None:
    """Indentation is meaning: the lines at the diff's own indentation are the place; the
    copy inside `class Again` (4 columns deeper) is other code."""
    result = edit(udiff(ORIGINAL, FIXED, n=1)).apply(TWICE)
    assert result.verdict == "changed", result.message
    assert result.source == TWICE.replace('["llama", "qwen"]', '["llama", "qwen", "kimi_k2"]', 1)
    assert edit(udiff(ORIGINAL, FIXED, n=1)).apply(result.source).verdict == "already"


def test_the_section_header_chooses_between_equal_places() -> None:
    diff = udiff(ORIGINAL, FIXED, n=1).replace(" @@\n", " @@ class Again:\n")
    result = edit(diff).apply(TWICE)
    assert result.verdict == "changed", result.message
    assert result.source.count('"kimi_k2"') == 1
    assert result.source.index('"kimi_k2"') > result.source.index("class Again")
    assert "at line 17 in Again.verify" in result.message
    # the header names a def after the hunk: not found there, not elsewhere
    helper_fix = udiff(ORIGINAL, ORIGINAL.replace("return 1", "return 2"), n=1)
    wrong = helper_fix.replace(" @@\n", " @@ def verify(kind):\n")
    missed = edit(wrong).apply(ORIGINAL)
    assert missed.verdict == "not_found"
    assert "not found in verify" in missed.message


def test_half_applied_diff_applies_the_rest_and_says_which() -> None:
    new = FIXED.replace("import os\n", "import os\nimport sys\n")
    diff = udiff(ORIGINAL, new, n=1)
    assert diff.count("@@ ") == 2
    half = ORIGINAL.replace("import os\n", "import os\nimport sys\n")
    result = edit(diff).apply(half)
    assert result.verdict == "changed"
    assert result.source == new
    assert "applied hunk 2 at line" in result.message and "already in place: hunk 1" in result.message
    assert edit(diff).apply(new).verdict == "already"


def test_formatting_outside_the_hunks_is_kept_byte_for_byte() -> None:
    target = ORIGINAL.replace("import os", "import os  # odd   spacing\t ") + "x = {  'a' :1 }\n"
    result = edit(FIX).apply(target)
    assert result.source == target.replace('["llama", "qwen"]', '["llama", "qwen", "kimi_k2"]')


def test_a_result_that_does_not_compile_is_refused() -> None:
    broken = FIX.replace('+    supported = ["llama", "qwen", "kimi_k2"]', '+    supported = ["llama", "qwen",')
    result = edit(broken).apply(ORIGINAL)
    assert result.verdict == "not_found"
    assert "the result does not compile" in result.message
    assert result.source == ORIGINAL


def test_no_newline_at_end_of_file() -> None:
    old = ORIGINAL.rstrip("\n")
    new = old + "\n\n\nLIMIT = 3\n"
    diff = udiff(old, new).replace("-    return True+", "-    return True\n\\ No newline at end of file\n+")
    target = "# a header line\n" + old  # shifted, still without a final newline
    result = edit(diff).apply(target)
    assert result.verdict == "changed", result.message
    assert result.source == "# a header line\n" + new
    assert edit(diff).apply(result.source).verdict == "already"
    # the diff says the old file ends there: a file that goes on is not that place
    assert edit(diff).apply(target + "\nmore = 1\n").verdict == "not_found"


ADD_AND_DELETE = """\
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,2 @@
+def fresh():
+    return 2
diff --git a/pkg/old.py b/pkg/old.py
deleted file mode 100644
--- a/pkg/old.py
+++ /dev/null
@@ -1,2 +0,0 @@
-def stale():
-    return 0
"""


def test_added_and_deleted_files() -> None:
    spec = edit(ADD_AND_DELETE).op
    assert [t[:2] for t in spec.targets()] == [("pkg/new.py", "pkg.new"), ("pkg/old.py", "pkg.old")]
    created = spec.apply_to("pkg/new.py", None)
    assert (created.verdict, created.source) == ("changed", "def fresh():\n    return 2\n")
    assert spec.apply_to("pkg/new.py", created.source).verdict == "already"
    assert spec.apply_to("pkg/new.py", "other = 1\n").verdict == "not_found"
    gone = spec.apply_to("pkg/old.py", "def stale():\n    return 0\n")
    assert (gone.verdict, gone.source) == ("changed", None)
    assert spec.apply_to("pkg/old.py", None).verdict == "already"
    kept = spec.apply_to("pkg/old.py", "def stale():\n    return 1\n")
    assert kept.verdict == "not_found" and "not deleted" in kept.message


def test_renames_are_refused_with_a_clear_error() -> None:
    git_rename = ("diff --git a/pkg/a.py b/pkg/b.py\nsimilarity index 90%\nrename from pkg/a.py\n"
                  "rename to pkg/b.py\n--- a/pkg/a.py\n+++ b/pkg/b.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    with pytest.raises(ValueError, match=r"line 1: renames are not supported \(rename from pkg/a.py\)"):
        edit(git_rename)
    pure = "diff --git a/pkg/a.py b/pkg/b.py\nsimilarity index 100%\nrename from pkg/a.py\nrename to pkg/b.py\n"
    with pytest.raises(ValueError, match="renames are not supported"):
        edit(pure)
    plain = "--- a/pkg/a.py\n+++ b/pkg/b.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    with pytest.raises(ValueError, match=r"renames are not supported \(pkg/a.py -> pkg/b.py"):
        edit(plain)


def test_parse_errors_name_the_line() -> None:
    with pytest.raises(DiffError, match="line 3: hunk @@ -1,2 \\+1,2 @@ ends early"):
        parse_diff("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 2\n")
    with pytest.raises(DiffError, match="no unified diff"):
        parse_diff("just words\n")
    with pytest.raises(ValueError, match="not a Python module"):
        edit("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(ValueError, match="exactly one of `file`"):
        Edit.model_validate({"diff": {}})


def test_strip_and_modules() -> None:
    diff = udiff("x = 1\n", "x = 2\n", path="src/vllm/config/__init__.py")
    assert edit(diff, strip=2).op.modules == ["vllm.config"]
    with pytest.raises(ValueError, match="strip 9 leaves no file name"):
        edit(diff, strip=9)


def test_hunk_without_context_is_refused() -> None:
    diff = udiff(ORIGINAL, ORIGINAL + "X = 1\n", n=0)
    result = edit(diff).apply(ORIGINAL)
    assert result.verdict == "not_found" and "has no context lines" in result.message


def test_hunk_outcomes_in_order() -> None:
    patch = parse_diff(FIX).files[0]
    outcome = apply_file_patch(patch, "pkg/mod.py", ORIGINAL)
    assert [(h.verdict, h.line) for h in outcome.hunks] == [("applied", 9)]


def write_recipe(folder: Path, edit_yaml: str, modules: str = "") -> Path:
    recipe = folder / "r.yaml"
    lines = ["name: r", "steps:", "  - name: fix", "    patch:", "      package: pkg"]
    if modules:
        lines.append(f"      modules: {modules}")
    lines += ["      edit:", f"        {edit_yaml}", ""]
    recipe.write_text("\n".join(lines))
    return recipe


def test_recipe_reads_the_diff_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "fix.patch").write_text(FIX)
    loaded = load_recipe(write_recipe(tmp_path, "diff: {file: fix.patch}"))
    step = loaded.recipe.steps[0]
    assert step.patch is not None and step.patch.modules == ["pkg.mod"]
    assert step.patch.edit.apply(ORIGINAL).source == FIXED


def test_recipe_errors_are_one_line_with_file_line_col(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as missing:
        load_recipe(write_recipe(tmp_path, "diff: {file: nothere.patch}"))
    assert str(missing.value).startswith(f"{tmp_path / 'r.yaml'}:7:")
    assert "cannot read diff file" in str(missing.value) and "\n" not in str(missing.value)
    (tmp_path / "fix.patch").write_text(FIX)
    with pytest.raises(UsageError) as disagree:
        load_recipe(write_recipe(tmp_path, "diff: {file: fix.patch}", modules="[pkg.other]"))
    assert "modules" in str(disagree.value) and "pkg.mod" in str(disagree.value)
    (tmp_path / "bad.patch").write_text("--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-x\n")
    with pytest.raises(UsageError, match=r"r.yaml:7:\d+: .*bad.patch line 3: hunk"):
        load_recipe(write_recipe(tmp_path, "diff: {file: bad.patch}"))
    with pytest.raises(UsageError, match="outside the recipe's folder"):
        load_recipe(write_recipe(tmp_path, "diff: {file: ../fix.patch}"))


def test_a_section_naming_no_scope_of_the_file_falls_back_to_the_lines() -> None:
    diff = FIX.replace(" @@\n", " @@ def renamed_since(kind):\n")
    result = edit(diff).apply(ORIGINAL)
    assert result.verdict == "changed"
    assert "this file has no `def renamed_since`: located by its lines alone" in result.message


@pytest.mark.parametrize(("version", "versions", "past"), [
    ("0.22.0", ">=0.10.1,<0.22", True), ("0.21.0", ">=0.10.1,<0.22", False), ("0.9.0", ">=0.10.1,<0.22", False),
    ("0.16.0", "==0.15.1", True), ("0.15.0", "==0.15.1", False), ("0.16.1", "<=0.16.0", True),
    ("1.0", ">=0.17", False), ("0.18.0", "~=0.17.0", True),
])
def test_past_the_range(version: str, versions: str, past: bool) -> None:
    from patchkit.run.steps.upstream import past_range

    assert past_range(version, versions) is past


def test_a_header_naming_the_hunks_own_first_line() -> None:
    """Some tools (and `patchkit capture`) name the def the hunk starts on, not the one before it."""
    diff = udiff(ORIGINAL, FIXED, n=1).replace(" @@\n", " @@ def verify(kind):\n")
    assert "\n def verify(kind):\n" in diff  # the hunk's first line is the def itself
    result = edit(diff).apply(ORIGINAL)
    assert result.verdict == "changed", result.message
    assert result.source == FIXED and "in verify" in result.message
    twice = edit(diff).apply(FLAT_TWICE)  # both defs are `def verify(kind):`: nothing tells them apart
    assert twice.verdict == "not_found" and "is ambiguous" in twice.message
