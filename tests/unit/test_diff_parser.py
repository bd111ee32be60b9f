"""The diff parser on what git writes that plain `diff -u` does not: empty files
added or deleted (a `diff --git` line and a mode, no `---`/`+++`, no hunk), names git quotes
(`"a/pkg/caf\\303\\251.py"`: C escapes, UTF-8 bytes in octal), and the reversed diff."""

from __future__ import annotations

import pytest

from patchkit.edits import Edit
from patchkit.edits.unified_diff import DEV_NULL, DiffError, parse_diff, reversed_diff

# as `git diff` writes it: an empty new file, a quoted UTF-8 name, a deleted empty file
GIT = r'''diff --git a/pkg/empty.py b/pkg/empty.py
new file mode 100644
index 0000000..e69de29
diff --git "a/pkg/caf\303\251.py" "b/pkg/caf\303\251.py"
index 1f2a3b4..5c6d7e8 100644
--- "a/pkg/caf\303\251.py"
+++ "b/pkg/caf\303\251.py"
@@ -1,2 +1,2 @@
 name = "café"
-x = 1
+x = 2
diff --git a/pkg/gone.py b/pkg/gone.py
deleted file mode 100644
index e69de29..0000000
'''


def test_git_sections_without_hunks_and_quoted_names() -> None:
    files = parse_diff(GIT).files
    assert [(f.old_path, f.new_path, len(f.hunks)) for f in files] == [
        (DEV_NULL, "b/pkg/empty.py", 0), ("a/pkg/café.py", "b/pkg/café.py", 1), ("a/pkg/gone.py", DEV_NULL, 0)]
    assert files[1].hunks[0].lines[0].text == 'name = "café"'  # git quotes names, never content


def test_the_empty_files_are_added_and_deleted_by_the_edit() -> None:
    spec = Edit.model_validate({"diff": {"text": GIT}}).op
    assert [t[:2] for t in spec.targets()] == [("pkg/empty.py", "pkg.empty"), ("pkg/café.py", "pkg.café"),
                                                ("pkg/gone.py", "pkg.gone")]
    created = spec.apply_to("pkg/empty.py", None)
    assert (created.verdict, created.source) == ("changed", "")  # the file exists afterwards, empty
    assert spec.apply_to("pkg/empty.py", "").verdict == "already"
    assert spec.apply_to("pkg/empty.py", "x = 1\n").verdict == "not_found"
    gone = spec.apply_to("pkg/gone.py", "")
    assert (gone.verdict, gone.source) == ("changed", None)
    assert spec.apply_to("pkg/gone.py", None).verdict == "already"
    kept = spec.apply_to("pkg/gone.py", "x = 1\n")
    assert kept.verdict == "not_found" and "not deleted" in kept.message
    changed = spec.apply_to("pkg/café.py", 'name = "café"\nx = 1\n')
    assert (changed.verdict, changed.source) == ("changed", 'name = "café"\nx = 2\n')


def test_reversed_diff_swaps_sides() -> None:
    back = reversed_diff(parse_diff(GIT)).files
    assert [(f.old_path, f.new_path) for f in back] == [
        ("b/pkg/empty.py", DEV_NULL), ("b/pkg/café.py", "a/pkg/café.py"), (DEV_NULL, "a/pkg/gone.py")]
    assert [(line.tag, line.text) for line in back[1].hunks[0].lines[1:]] == [("+", "x = 1"), ("-", "x = 2")]
    spec = Edit.model_validate({"diff": {"text": GIT, "reverse": True}}).op
    assert spec.apply_to("pkg/empty.py", "").verdict == "changed"  # taken out again
    assert spec.apply_to("pkg/empty.py", "").source is None
    assert (spec.apply_to("pkg/gone.py", None).verdict, spec.apply_to("pkg/gone.py", None).source) == ("changed", "")


def test_an_emptied_file_and_one_filled_from_empty() -> None:
    """A file that stays but becomes empty (or was empty): git writes `@@ -1,2 +0,0 @@` /
    `@@ -0,0 +1,2 @@`; no context, the whole file is the place."""
    fill = "--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -0,0 +1,2 @@\n+A = 1\n+B = 2\n"
    spec = Edit.model_validate({"diff": {"text": fill}})
    assert (spec.apply("").verdict, spec.apply("").source) == ("changed", "A = 1\nB = 2\n")
    assert spec.apply("A = 1\nB = 2\n").verdict == "already"
    assert spec.apply("C = 3\n").verdict == "not_found"
    empty = Edit.model_validate({"diff": {"text": fill, "reverse": True}})
    assert (empty.apply("A = 1\nB = 2\n").verdict, empty.apply("A = 1\nB = 2\n").source) == ("changed", "")
    assert empty.apply("").verdict == "already"


@pytest.mark.parametrize("line", [
    'diff --git "a/pkg/caf\\303.py" "b/pkg/caf\\303.py"',  # a lone UTF-8 lead byte
    'diff --git a/pkg/x.py',  # one name
])
def test_an_unreadable_name_of_an_empty_file_is_refused_naming_the_line(line: str) -> None:
    with pytest.raises(DiffError, match="line 1: cannot read the file names"):
        parse_diff(f"{line}\nnew file mode 100644\nindex 0000000..e69de29\n")


def test_an_empty_git_file_followed_by_a_plain_diff_section() -> None:
    """Diffs pasted together: git's empty-file section, then `diff -u` output (no `diff --git`)."""
    text = ("diff --git a/pkg/e.py b/pkg/e.py\nnew file mode 100644\nindex 0000000..e69de29\n"
            "--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    assert [(f.old_path, f.new_path) for f in parse_diff(text).files] == [(DEV_NULL, "b/pkg/e.py"),
                                                                          ("a/pkg/m.py", "b/pkg/m.py")]
