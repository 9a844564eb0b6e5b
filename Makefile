# CBS Lab — the two commands of the README's quick start are `make run` and `make test`.
# Both create .venv when it is missing. torch comes first so that a CPU host never pulls a
# multi-GB CUDA build and a GPU host keeps the CUDA torch it already has.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
# Every cache a test or CI run touches stays inside the checkout.
CACHE := $(CURDIR)/.cache
TEST_ENV := HF_HOME=$(CACHE)/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
	TORCHINDUCTOR_CACHE_DIR=$(CACHE)/inductor MLFLOW_DISABLE_TELEMETRY=true \
	DO_NOT_TRACK=1 STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
	XDG_CACHE_HOME=$(CACHE)/xdg MPLCONFIGDIR=$(CACHE)/mpl
PYTEST_ARGS ?= --durations=5
# The suite in this many processes (pytest-xdist); `services` tests share one (tests/conftest.py).
# On two cores: 7.9 min instead of 10.4 (stop 35). PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup)

.PHONY: install cuda-torch browser slurm run lint test test-all bench clean

# True when torch is a CUDA build (it may still see no GPU: that is the driver's business).
HAS_CUDA_BUILD := import sys, torch; sys.exit(0 if torch.version.cuda else 1)
# How a CPU-only torch is replaced on a GPU host (a variable: the Makefile's test stands in for pip).
TORCH_CUDA_INSTALL ?= $(PY) -m pip uninstall -y -q torch && $(PY) -m pip install "torch==$(TORCH_VERSION)"

# A host whose python3 already has torch (a GPU host with its CUDA build) shares it. When that
# python3 is itself a virtual environment (sys.prefix != sys.base_prefix, as on the GPU image),
# `venv --system-site-packages` would share its *base* interpreter's packages, not that venv's:
# a .pth file in the new venv adds that venv's site-packages after its own instead.
IS_VENV := import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)
SITE_DIRS := import site, sysconfig; print(*dict.fromkeys([*site.getsitepackages(), sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]), sep='\n')
OUTER_PTH = $$($(PY) -c "import sysconfig; print(sysconfig.get_path('purelib'))")/_outer_venv.pth
# Extra options of `python -m venv` (the Makefile's test passes --without-pip).
VENV_FLAGS ?=

$(PY):
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
		$(PYTHON) -m venv $(VENV_FLAGS) --system-site-packages $(VENV) && \
		if $(PYTHON) -c "$(IS_VENV)"; then $(PYTHON) -c "$(SITE_DIRS)" > "$(OUTER_PTH)"; fi; \
	else $(PYTHON) -m venv $(VENV_FLAGS) $(VENV); fi

$(VENV)/.installed: pyproject.toml | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || { if command -v nvidia-smi >/dev/null 2>&1; then \
		  $(PY) -m pip install "torch==$(TORCH_VERSION)"; \
		else $(PY) -m pip install --no-index --no-deps "torch==$(TORCH_VERSION)" 2>/dev/null || \
		  $(PY) -m pip install "torch==$(TORCH_VERSION)" --index-url https://download.pytorch.org/whl/cpu; fi; }
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

install: $(VENV)/.installed cuda-torch

# A GPU host (nvidia-smi answers) needs a CUDA build of torch: with a CPU-only one (an old venv, a
# system Python's CPU wheel) every GPU trial fails and `pytest -m gpu` skips. Checked on every
# install; replaced once, and an error if it is still CPU-only.
cuda-torch:
	@if command -v nvidia-smi >/dev/null 2>&1 && ! $(PY) -c "$(HAS_CUDA_BUILD)" 2>/dev/null; then \
		echo "make: this host has an NVIDIA GPU (nvidia-smi) but $(PY) has a CPU-only torch: installing torch==$(TORCH_VERSION) with CUDA"; \
		$(TORCH_CUDA_INSTALL) || true; \
		$(PY) -c "$(HAS_CUDA_BUILD)" 2>/dev/null || { echo "make: error: $(PY) still has a CPU-only torch on a GPU host; install a CUDA build (pip install torch==$(TORCH_VERSION)) or remove $(VENV) and run make again"; exit 1; }; \
	fi

run: install
	$(VENV)/bin/cbs up

# The end-to-end page test drives Debian's chromium through chromedriver; install them when
# missing (as root, as in CI). Without them the e2e test skips and says why.
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
		else echo "note: the e2e test needs chromium and chromium-driver (apt-get install chromium chromium-driver)"; fi; }

# The SLURM tests start their own one-node cluster from Debian's slurm-wlm and munge (never the
# host's daemons or key); install them when missing (as root, as in CI). Without them they skip.
slurm:
	@command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; \
		else echo "note: the SLURM tests need slurm-wlm and munge (apt-get install slurm-wlm munge)"; fi; }

# ruff, with the rules of pyproject.toml's [tool.ruff] (version pinned in the test extra).
lint: install
	$(PY) -m ruff check .

# ruff first: a lint error fails the run in a second, before nine minutes of tests.
test: install browser slurm
	$(PY) -m ruff check .
	$(TEST_ENV) $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-all: install browser slurm
	$(TEST_ENV) $(PY) -m pytest -m "not gpu" $(XDIST) $(PYTEST_ARGS)

bench: install
	$(TEST_ENV) $(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .cache .pytest_cache
