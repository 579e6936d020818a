# flashcore: two commands do everything on a fresh machine.
#   make reproduce   execute every notebook headlessly (papermill) and render figures/
#   make test        pytest (CPU: Triton interpreter) + nbval on the committed notebooks
# Each creates .venv on first use. To use an environment you already have
# (e.g. conda env from environment.yml):  make test PY=$(which python)

SHELL   := /bin/bash
PYTHON  ?= python3
VENV    ?= .venv
PROFILE ?= auto
# GPU profile sweeps: "quick" (default; each notebook in 10 s to about 2 minutes on an H100,
# results/<gpu>/reproduce_timing.json) or "full" (the recorded sweeps, which rewrite
# results/<gpu>/<topic>.json).
SWEEP   ?= quick

ifeq ($(origin PY), undefined)
PY    := $(VENV)/bin/python
ENV   := $(VENV)/.installed
else
ENV   :=
endif

NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
# After papermill: drop its injected-parameters cell and run metadata (timings, versions),
# keep outputs, execution counts and tags, so a committed notebook changes only with its content.
STRIP := -m nbstripout --keep-output --keep-count --drop-tagged-cells injected-parameters \
         --extra-keys "metadata.papermill cell.metadata.papermill cell.metadata.execution metadata.language_info.version"

.PHONY: env reproduce test test-fast lab gpu-record time-reproduce clean-env

env: $(ENV)

# torch first, chosen for the machine: where nvidia-smi sees a GPU, torch 2.11's CUDA build
# (it pins triton 3.6.0, the one triton this package supports); otherwise the CPU build
# (torch==2.13.0 is available offline on the CPU machines; an unpinned `torch` there would
# pull several GB of CUDA packages), beside which pyproject.toml installs triton 3.6.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	if nvidia-smi -L >/dev/null 2>&1; then \
	  $(VENV)/bin/python -m pip install -q "torch==$${FLASHCORE_GPU_TORCH:-2.11.*}" ; \
	else \
	  $(VENV)/bin/python -m pip install -q torch==$${FLASHCORE_CPU_TORCH:-2.13.0} || \
	  $(VENV)/bin/python -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu ; \
	fi
	$(VENV)/bin/python -m pip install -q -e ".[notebooks,test]"
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# Execute every notebook in place (papermill), which re-renders figures/, then join the
# stream outputs the kernel sent in pieces (one per flush, so their number depends on the
# machine's speed), strip the run metadata and bring each .py source in step with its executed
# .ipynb (jupytext --sync). Progress bars go to this terminal, not into the notebooks
# (flashcore.notebook.setup). A CPU-profile run on a clean tree leaves `git status` clean
# (.ci/run checks it). PROFILE=auto picks "gpu" when CUDA is available, else "cpu". A pair
# must be in sync before the run: papermill executes the .ipynb, so an unsynced edit to the
# .py would be overwritten.
reproduce: $(ENV)
	$(PY) -m pytest -q tests/test_notebook_pairs.py
	@for nb in $(NOTEBOOKS); do \
	  echo "== $$nb (PROFILE=$(PROFILE) SWEEP=$(SWEEP))"; \
	  $(PY) -m papermill --kernel python3 --cwd notebooks -p PROFILE $(PROFILE) -p SWEEP $(SWEEP) "$$nb" "$$nb" || exit 1; \
	  $(PY) -m flashcore.notebook merge-streams "$$nb" || exit 1; \
	  $(PY) $(STRIP) "$$nb" || exit 1; \
	  $(PY) -m jupytext --quiet --sync "$$nb" || exit 1; \
	done

# Unit tests (Triton interpreter on CPU; GPU-marked tests run where CUDA exists), the
# numerical ones again under a second CPU code path, then nbval: re-execute each committed
# notebook and compare NBVAL_CHECK_OUTPUT cells.
# Lint and format check first (ruff, configured in pyproject.toml; `ruff format` and
# `ruff check --fix` apply them). The pair check (tests/test_notebook_pairs.py) fails when a
# .py and its .ipynb differ.
#
# Second code path: a test that passes by the rounding of one CPU's SIMD code fails on the
# next machine, so the numerical tests run twice, on this machine's own code paths and on
# another one's. Under the interpreter the kernels' arithmetic is numpy's (exp2 and log2 have
# AVX-512 variants that round differently) and OpenBLAS's (tl.dot); the references are
# ATen's, MKL's and oneDNN's. Each has its own switch, so CPU_PATH2 sets them all:
# "avx2" makes an AVX-512 machine compute as an AVX2 one, "default" as one with no dispatch
# beyond SSE4 (the second path of an AVX2 machine). Every test file runs under it but the
# NOT_NUMERICAL ones, which check source, SASS text, bookkeeping or error messages.
# `make test CPU_PATH2=none` skips it.
CPU_PATH2 ?= $(shell $(PY) -c "import torch; print('avx2' if torch.backends.cpu.get_cpu_capability() == 'AVX512' else 'default')")
NPY_AVX512 := AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR
CPU_PATH_avx2 := ATEN_CPU_CAPABILITY=avx2 NPY_DISABLE_CPU_FEATURES="$(NPY_AVX512)" \
                 OPENBLAS_CORETYPE=Haswell MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
CPU_PATH_default := ATEN_CPU_CAPABILITY=default NPY_DISABLE_CPU_FEATURES="AVX F16C FMA3 AVX2 $(NPY_AVX512)" \
                    OPENBLAS_CORETYPE=Nehalem MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41
NOT_NUMERICAL := test_architecture test_cli test_errors test_long_context test_notebook_pairs \
                 test_sass test_timing_power test_tuning_skips
test: $(ENV)
	$(PY) -m ruff check
	$(PY) -m ruff format --check
	$(PY) -m pytest -q tests
	@case "$(CPU_PATH2)" in none) ;; avx2|default) echo "== again under CPU_PATH2=$(CPU_PATH2)";; \
	  *) echo "CPU_PATH2 must be avx2, default or none, got '$(CPU_PATH2)'"; exit 1;; esac
	$(if $(filter none,$(CPU_PATH2)),,env $(CPU_PATH_$(CPU_PATH2)) \
	  $(PY) -m pytest -q tests $(NOT_NUMERICAL:%=--ignore=tests/%.py))
	$(PY) -m pytest -q --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg --nbval-kernel-name python3 notebooks

lab: $(ENV)
	$(PY) -m jupyter lab notebooks

# On a CUDA machine: the sanitizer record, the GPU-marked tests, then every notebook in
# the GPU profile (which measures live and writes results/<gpu>/*.json).
gpu-record: $(ENV)
	$(PY) -m flashcore sanitize --record
	$(PY) -m pytest -q -m gpu tests
	$(MAKE) reproduce PY=$(PY) PROFILE=gpu SWEEP=full

# Time every notebook's GPU profile (papermill, executed copies in a temporary directory)
# and record results/<gpu>/reproduce_timing.json, keeping the rows of notebooks not timed now
# (each row names its commit). NOTEBOOKS_TO_TIME narrows the list.
NOTEBOOKS_TO_TIME ?= $(NOTEBOOKS)
time-reproduce: $(ENV)
	$(PY) tools/time_reproduce.py --profile gpu -p SWEEP $(SWEEP) --record --merge $(NOTEBOOKS_TO_TIME)

clean-env:
	rm -rf $(VENV)
