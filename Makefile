# patchkit — the README names these targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SHELL  := bash
.SHELLFLAGS := -eo pipefail -c
# pip here warns about every configured index folder it cannot use; keep real errors only.
QUIET_PIP := grep -v -e 'is ignored: it is neither a file nor a directory' -e '^ *$$' || true

.PHONY: setup demo test test-fast clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]' 2>&1 | { $(QUIET_PIP); }
	touch $@

setup: $(VENV)/.installed

## The main job on the embedded default: a local sandbox with real vLLM 0.16.0,
## plan -> apply -> status -> apply again -> rollback.
demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash demo/quickstart.sh

## The whole test suite (what .ci/run calls). Builds and caches the real vLLM
## environment under $${PATCHKIT_CACHE_DIR:-~/.cache/patchkit} on first use.
test: setup
	$(PY) -m pytest

## Only the tiers that need no real vLLM environment and no wheels.
test-fast: setup
	$(PY) -m pytest -m "not realenv and not wheels"

clean:
	rm -rf $(VENV) .demo
