#!/usr/bin/env python3
"""Run the patchkit CLI in this process under cProfile, timed by CPU (not wall) time.

    PY bench/cprofile_run.py OUT.prof apply RECIPE -i INVENTORY --json

PY is the interpreter whose patchkit is to be profiled (another checkout's venv profiles
that build). CPU time, because the fleet benchmarks run on a busy 2-core machine: a wall-clock
profile would charge the control side for time it spent waiting for the hosts. The CPU
seconds of the whole process are printed on stderr as `cpu_s=...`; the top functions by
cumulative and by own time go to OUT.txt beside OUT.prof. SSH's own work runs in the SSH
helper process (host/transport/sshhelper.py), which this profile does not see: set
PATCHKIT_SSH_HELPER=0 to profile it in this process.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    from patchkit.cli.main import main as cli_main

    profile = cProfile.Profile(time.process_time)
    cpu0 = time.process_time()
    code = 0
    profile.enable()
    try:
        cli_main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        profile.disable()
        cpu = time.process_time() - cpu0
        profile.dump_stats(out)
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(35)
        with open(out.rsplit(".", 1)[0] + ".txt", "w") as f:
            f.write(f"cpu_s={cpu:.3f} argv={argv}\n{text.getvalue()}")
        print(f"cpu_s={cpu:.3f}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
