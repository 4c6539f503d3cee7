# The two commands a new user needs: `make demo` (the main job) and `make test`.
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export ANONYMIZED_TELEMETRY := False
# langgraph dev: no version check against PyPI, no CLI analytics (offline by default)
export LANGGRAPH_NO_VERSION_CHECK := true
export LANGGRAPH_CLI_NO_ANALYTICS := 1
# Bytecode is written: the tests start many interpreters (CLI runs, killed processes, replicas, two workers),
# and a machine that sets PYTHONDONTWRITEBYTECODE had each of them compile langchain, langgraph and chromadb
# again (15.5 s of a worker's collection, 5.9 s with the bytecode kept).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo test test-slow lint bench serve

setup:
	@scripts/bootstrap.sh

LOCOMO := ../shared/data/locomo/conv-26.json

demo: setup
	@if [ -f $(LOCOMO) ]; then $(PY) -m strata demo --file $(LOCOMO) --questions 5; \
	else echo "$(LOCOMO) not found: the demo uses the conversation the project ships (strata/data/sample_conversation.json)" >&2; \
	$(PY) -m strata demo --questions 5; fi

test: setup
	@$(PY) -m pytest -m "not slow" -q -n 2 --dist loadfile

test-slow: setup
	@$(PY) -m pytest -m slow -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "no slow tests selected"; exit 0; fi; exit $$rc

lint: setup
	@.venv/bin/ruff check .

bench: setup
	@$(PY) benchmarks/ingest_and_query.py

serve: setup
	@.venv/bin/langgraph dev --host 127.0.0.1 --port 2024
