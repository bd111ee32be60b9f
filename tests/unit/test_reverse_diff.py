"""What a rollback's report shows: the reverse of the apply's diff (run/steps/unit.py
reverse_diff), read back by the project's own diff edit as the change from the patched file
to the original, look-alike header lines and other line endings included."""

from __future__ import annotations

from patchkit.edits import Edit
from patchkit.run.steps.patch import unified_diff
from patchkit.run.steps.unit import reverse_diff

OLD = "import os\n\n-- a comment in a string\nA = 1\n-- x\n" + "".join(f"x{i} = {i}\n" for i in range(12))
NEW = OLD.replace("A = 1\n-- x\n", "++ y\n--- x\nA = 2\n").replace("x9 = 9\n", "")


def apply(diff: str, source: str) -> str:
    result = Edit.model_validate({"diff": {"text": diff}}).apply(source)
    assert result.verdict == "changed", result.message
    return result.source


def test_the_reverse_diff_takes_the_patched_file_back_to_the_original() -> None:
    forward = unified_diff("/pkg/mod.py", OLD, NEW)
    assert apply(forward, OLD) == NEW
    back = reverse_diff(forward)
    assert apply(back, NEW) == OLD
    assert back == unified_diff("/pkg/mod.py", NEW, OLD)  # what diffing the other way writes, byte for byte
    assert reverse_diff(back) == forward
    crlf_old, crlf_new = OLD.replace("\n", "\r\n"), NEW.replace("\n", "\r\n")
    crlf = unified_diff("/pkg/mod.py", crlf_old, crlf_new)
    assert reverse_diff(crlf) == unified_diff("/pkg/mod.py", crlf_new, crlf_old)


def test_an_added_file_is_removed_and_a_missing_newline_stays_with_its_line() -> None:
    added = unified_diff("/pkg/new.py", "", "A = 1\n").replace("--- a/pkg/new.py", "--- /dev/null", 1)
    assert reverse_diff(added) == "--- a/pkg/new.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-A = 1\n"
    no_newline = "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-A = 1\n\\ No newline at end of file\n+A = 2\n"
    assert reverse_diff(no_newline) == ("--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-A = 2\n+A = 1\n"
                                        "\\ No newline at end of file\n")
