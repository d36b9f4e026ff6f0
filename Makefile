# The two commands of the README: `make run` and `make test`. Everything else
# here is what they are made of.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CODE   := service tests bench

.PHONY: setup browser run test test-fast lint typecheck pytest nacos-start nacos-stop bench image-check clean
.PHONY: docs docs-check

A2A_1X := .cache/a2a-sdk-1

setup: $(VENV)/.installed browser $(A2A_1X)/.installed

## Debian's Chromium for the operations page tests (apt-get install when missing).
browser:
	scripts/browser.sh

## The a2a-sdk 1.x client in a virtualenv of its own: the A2A tests drive the service with the
## clients of both protocol lines, and the service itself uses the 0.3 line.
$(A2A_1X)/.installed:
	$(PYTHON) -m venv $(A2A_1X)
	$(A2A_1X)/bin/pip install --quiet 'a2a-sdk>=1,<2'
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## Serve the samples in config-samples/ (offline test model, no Nacos needed).
run: setup
	$(BIN)/dynagent serve --config config-samples/service.yaml

## Lint, check the import contracts, type-check, build the docs site strictly (a broken
## link or a page left out of the nav fails), then run every test (starts and stops a real
## Nacos server, redis-server, MCP servers and headless Chromium as the tests need them).
test: setup lint typecheck docs-check pytest

## The inner loop (under 3 minutes on 2 cores): lint, types, and every test but the nacos, browser and slow ones.
test-fast: lint typecheck $(A2A_1X)/.installed
	$(BIN)/pytest -q -n 2 -m "not nacos and not browser and not slow"

lint: $(VENV)/.installed
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check .  # code, and the code blocks of the docs
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed
	$(BIN)/mypy

## Every test: the fast tier with the soak beside it, then the tests that start servers
## (scripts/pytest-tiers.sh says why; the 30 slowest are listed at the end).
pytest: setup
	BIN=$(BIN) scripts/pytest-tiers.sh

## The docs site (mkdocs.yml, docs/) into var/site/.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build

docs-check: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir var/site-check

nacos-start:
	scripts/nacos.sh start

nacos-stop:
	scripts/nacos.sh stop

## Every benchmark, quick mode: the figures behind docs/benchmarks.md's bars; starts its own Nacos.
bench: setup $(VENV)/.bench-installed
	$(BIN)/python -m bench --quick

$(VENV)/.bench-installed: pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

## The image, built with buildah (no engine) and started: its own check, about 3 minutes.
image-check:
	scripts/image.sh check

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache var
