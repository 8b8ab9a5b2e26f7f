# Every target sets up .venv itself, so each works on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: system-demo system-test system-real demo test test-ssh lint bench bench-ci bench-ssh stress dist wheel-check test-real clean compile

# The system packages each kind of target needs (contrib/system-packages.sh
# installs the missing ones, or names the apt-get line and stops).
system-demo:
	@bash contrib/system-packages.sh demo
system-test:
	@bash contrib/system-packages.sh test
system-real:
	@bash contrib/system-packages.sh real

$(STAMP): pyproject.toml
	@bash contrib/system-packages.sh demo
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

# An editable install is never byte-compiled, and where PYTHONDONTWRITEBYTECODE
# is set nothing ever writes the cache: every `spex` (and every turn's exit
# reporter) would compile the package anew. Compile it, as pip does a wheel.
compile: $(STAMP)
	@$(BIN)/python -m compileall -q spexsup

demo: system-demo $(STAMP) compile
	$(BIN)/python contrib/demo.py

# Six workers on two cores: most of a test is waiting on its processes, so
# more of them overlap (7.5 minutes against 9 with four, 2026-12-06).
test: system-test $(STAMP) compile
	$(BIN)/python -m pytest -q -n 6

# Only the host tests (a real sshd on 127.0.0.1; part of `make test` too).
# They need root; openssh-server comes with the test packages.
test-ssh: system-test $(STAMP) compile
	$(BIN)/python -m pytest -q -n 2 tests/test_hosts.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict

# Every script records its figures against the goals of bench/goals.py in
# BENCH_RESULTS (one JSON line each); bench/report.py ends with one table of
# them all, met or NOT MET (exit 0: a goal missed is news, not a failure).
BENCH_RESULTS ?= bench/results/last.jsonl
BENCH := SPEXSUP_BENCH_RESULTS=$(abspath $(BENCH_RESULTS)) $(BIN)/python

bench: system-test $(STAMP) compile
	mkdir -p $(dir $(BENCH_RESULTS)) && rm -f $(BENCH_RESULTS)
	$(BENCH) bench/run.py
	$(BENCH) bench/startup.py
	$(BENCH) bench/prune.py
	$(BENCH) bench/top_idle.py
	$(BENCH) bench/reporter.py
	$(BENCH) bench/events.py
	$(BENCH) bench/queue_next.py
	$(BENCH) bench/queue_next.py --max-running
	$(BENCH) bench/fleet.py
	$(BENCH) bench/cost.py
	$(BENCH) bench/web.py
	$(BENCH) bench/sandbox.py
	$(BIN)/python bench/report.py $(BENCH_RESULTS)

# The short version CI runs (a few minutes): the issue-40 figures with fewer
# repetitions (p50s, each beside bare python) and 10 s idle windows; fails
# only when a figure is more than twice its goal, so load cannot flake it
# but a regression that size cannot land unnoticed.
bench-ci: system-test $(STAMP) compile
	mkdir -p $(dir $(BENCH_RESULTS)) && rm -f $(BENCH_RESULTS)
	SPEXSUP_BENCH_CI=1 $(BENCH) bench/startup.py
	SPEXSUP_BENCH_CI=1 $(BENCH) bench/run.py waves
	SPEXSUP_BENCH_CI=1 $(BENCH) bench/queue_next.py
	SPEXSUP_BENCH_CI=1 $(BENCH) bench/top_idle.py
	SPEXSUP_BENCH_CI=1 $(BENCH) bench/fleet.py
	$(BIN)/python bench/report.py $(BENCH_RESULTS) --fail-over 2

# `spex -H host ls --json` cold, warm and local, through a private sshd (root).
bench-ssh: system-test $(STAMP) compile
	$(BIN)/python bench/ssh.py

# sdist and wheel in dist/; the wheel carries shell/turn.sh inside the package.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# Install the wheel into a fresh venv outside the checkout and run one
# wake -> wait on the demo harness from another directory.
wheel-check: dist
	bash contrib/wheel-check.sh dist/*.whl

# Random wake/stop/resume/rm/wait/ls by 8 workers on 10 sessions for 60 s,
# then 100-leg waves for 60 s while a killer SIGKILLs spex CLIs, exit
# reporters and harnesses; each mode ends checking its invariants (not part
# of make test; about 4 minutes in all).
stress: $(STAMP) compile
	$(BIN)/python tests/stress.py --seconds 60 --workers 8 --sessions 10 --seed 1
	$(BIN)/python tests/stress.py --waves --seconds 60 --sessions 100 --seed 1

# The real agent CLIs from npm (about 1.2 GB), installed once into a cache dir.
REAL_CLIS ?= $(HOME)/.cache/spexsup/real-clis
REAL_PKGS := @anthropic-ai/claude-code @openai/codex opencode-ai @mariozechner/pi-coding-agent

$(REAL_CLIS)/node_modules/.bin/pi: | system-real
	mkdir -p $(REAL_CLIS)
	cd $(REAL_CLIS) && npm install --no-audit --no-fund $(REAL_PKGS)

# Against a fake model server on 127.0.0.1 (tests/modelserver.py): 3 workers
# keep the ~50 tests near 5 minutes on 2 cores (about 12 serially).
# The homes live on a disk, not in /tmp, as a user's do: codex 0.17x will not
# put its sandbox helper (codex-linux-sandbox, run by bubblewrap) under a
# CODEX_HOME in /tmp, and its shell tool then fails.
REAL_TMP ?= /var/tmp/spexsup-real-$(shell id -u)
test-real: system-real $(STAMP) compile $(REAL_CLIS)/node_modules/.bin/pi
	SPEXSUP_REAL_CLI_BIN=$(REAL_CLIS)/node_modules/.bin \
	  $(BIN)/python -m pytest -q -s -n 3 -m real --basetemp $(REAL_TMP) tests/test_real_harnesses.py

clean:
	rm -rf $(VENV) build dist *.egg-info
