"""`patchkit test`: a recipe's patch steps planned on every release of their package.

The flow, one module each:
    touchable.py  which files of a release a patch step can touch (only those are kept)
    index.py      the releases on the package index and their kept files (pip, cached)
    plan.py       one release planned by the real agent over a folder of its files
    matrix.py     the outcomes as a table: groups, shared diffs, verdicts, JSON
    command.py    the `patchkit test` command: releases -> files -> plans -> report
"""
