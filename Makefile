# Every target sets up .venv itself, so each works on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench test-real clean

$(STAMP): pyproject.toml
	@command -v tmux >/dev/null || { echo "tmux is required (apt-get install tmux)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python contrib/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 4

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict

bench: $(STAMP)
	$(BIN)/python bench/run.py

test-real: $(STAMP)
	$(BIN)/python -m pytest -q -m real tests/test_real_harnesses.py

clean:
	rm -rf $(VENV) build dist *.egg-info
