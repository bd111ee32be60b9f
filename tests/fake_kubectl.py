#!/usr/bin/env python3
"""A FAKE `kubectl`, for tests only: no Kubernetes API server can run on our machines.

It understands just what patchkit sends, and stands in for a cluster like this:
- `[--kubeconfig F] [--context C] exec -i -n NS POD [-c CONTAINER] -- ARGV...` runs
  `podman --runtime runc --cgroup-manager=cgroupfs exec -i POD ARGV...`: the pod is the podman
  container named POD (the namespace and CONTAINER are only recorded). The agent path, stdin
  to stdout, is therefore real; what a real kubelet does between kubectl and the container is
  not exercised. Without -c it notes `Defaulted container "vllm" out of: vllm, sidecar` on
  stderr, as kubectl does for a pod of several containers. When podman has no such container it answers as kubectl does:
  `Error from server (NotFound): pods "POD" not found`, exit 1; a stopped container gives
  kubectl's `error: cannot exec into a container in a completed pod; current phase is Succeeded`.
- `... get pods -l SEL -n NS -o json` prints the file $FAKE_KUBECTL_PODS (a captured pod
  list written by the test), whatever SEL and NS are.
- $FAKE_KUBECTL_LOG, if set: every invocation's argv is appended to it as one JSON line, so
  a test can check the flags patchkit passed (--kubeconfig, --context, -n, -c, -l).
- $FAKE_KUBECTL_REFUSE, if set: every command fails with that text on stderr, exit 1 (an
  unreachable API server, a forbidden exec...).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]


def main(argv: list[str]) -> int:
    log = os.environ.get("FAKE_KUBECTL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(argv) + "\n")
    refuse = os.environ.get("FAKE_KUBECTL_REFUSE")
    if refuse:
        print(refuse, file=sys.stderr)
        return 1
    args = list(argv)
    while args and args[0] in ("--kubeconfig", "--context"):  # global flags: recorded above only
        del args[:2]
    if args[:2] == ["get", "pods"]:
        with open(os.environ["FAKE_KUBECTL_PODS"]) as f:
            sys.stdout.write(f.read())
        return 0
    if args[:2] != ["exec", "-i"] or "--" not in args:
        print(f"fake kubectl: unsupported command {argv!r}", file=sys.stderr)
        return 2
    head, remote = args[2:args.index("--")], args[args.index("--") + 1:]
    pod = next(a for i, a in enumerate(head) if not a.startswith("-") and (i == 0 or head[i - 1] not in ("-n", "-c")))
    state = subprocess.run([*PODMAN, "container", "inspect", "--format", "{{.State.Running}}", pod],
                           check=False, capture_output=True, text=True)
    if state.returncode != 0:
        print(f'Error from server (NotFound): pods "{pod}" not found', file=sys.stderr)
        return 1
    if state.stdout.strip() != "true":
        print("error: cannot exec into a container in a completed pod; current phase is Succeeded", file=sys.stderr)
        return 1
    if "-c" not in head:  # as kubectl does on a pod of several containers
        print('Defaulted container "vllm" out of: vllm, sidecar', file=sys.stderr, flush=True)
    os.execvp(PODMAN[0], [*PODMAN, "exec", "-i", pod, *remote])
    return 127  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
