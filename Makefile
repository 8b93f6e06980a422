# Every target bootstraps .venv when it is missing; CI calls the same targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install demo test up down lint typecheck bench bench-quick clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/groundwork demo $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

up: $(STAMP)
	$(BIN)/groundwork up $(ARGS)

down: $(STAMP)
	$(BIN)/groundwork down

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/run_overhead.py

bench-quick: $(STAMP)
	$(BIN)/python bench/run_overhead.py --quick

clean:
	rm -rf $(VENV) .groundwork .pytest_cache .mypy_cache .ruff_cache
