#!/usr/bin/env python3
"""What a start-up bundle costs a server's start: the first start (apply, verified) and the
starts after it (the fix in place), as `python fix.pyz -- true` with this machine's python3.

    .venv/bin/python bench/bundle_start.py -n 20

Builds the toy releases of tests/agent/test_release_test.py into a find-links folder, a
bundle of their whitelist recipe (tests/agent/test_bundle.py), and a venv holding release
0.16.0 as pip installs it; then times, wall clock from fork to exit: the bare interpreter
(`python3 -c pass`, the floor), the first start, and `-n` starts with the fix in place.
Prints medians and the bundle's own figure (what it says after "in place (...) in").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.agent.test_bundle import bundle_recipe  # noqa: E402
from tests.agent.test_release_test import RELEASES, build_wheel, pip_sees_only  # noqa: E402
from tests.helpers import make_venv, run_patchkit  # noqa: E402


def timed(argv: list[str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd="/")
    return time.monotonic() - started, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20, help="starts with the fix in place (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="patchkit-bench-bundle-") as tmp:
        root = Path(tmp)
        (root / "links").mkdir()
        for version in RELEASES:
            build_wheel(root / "links", version)
        built = run_patchkit("bundle", str(bundle_recipe(root)), "-o", str(root / "fix.pyz"),
                             env=pip_sees_only(root / "links", root / "cache"), timeout=300)
        assert built.returncode == 0, built
        with zipfile.ZipFile(root / "links" / "toyllm-0.16.0-py3-none-any.whl") as wheel:
            wheel.extractall(root / "host" / "site")
        python = str(make_venv(root / "host", [root / "host" / "site"]))
        run = [python, str(root / "fix.pyz"), "--state-dir", str(root / "state"), "--", "true"]
        floor = statistics.median(timed([python, "-c", "pass"])[0] for _ in range(args.n))
        first, said = timed(run)
        again = [timed(run) for _ in range(args.n)]
        inside = [float(err.split(" in ")[-1].split(" s;")[0]) for _, err in again]
        print(f"python3 -c pass            {floor * 1000:7.1f} ms (median of {args.n})")
        print(f"first start (apply)        {first * 1000:7.1f} ms  ({said.strip().splitlines()[-1]})")
        print(f"fix in place, wall         {statistics.median(t for t, _ in again) * 1000:7.1f} ms (median of {args.n})")
        print(f"fix in place, bundle says  {statistics.median(inside) * 1000:7.1f} ms (median; from its __main__)")


if __name__ == "__main__":
    main()
