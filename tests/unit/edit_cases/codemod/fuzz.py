"""codemod is not fuzzed on real files (tests/edit_fuzz.py)."""

ELSEWHERE = "runs the recipe author's own transformer: what it promises is theirs to test"
