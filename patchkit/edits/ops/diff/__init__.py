"""diff: apply a unified diff by meaning (its engine: unified_diff.py reads it, hunk_locate.py places it)."""
