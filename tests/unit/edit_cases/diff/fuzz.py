"""diff is not fuzzed with random edits (tests/edit_fuzz.py)."""

ELSEWHERE = "tests/real/test_diff_real_releases.py applies the diffs between real releases"
