# Two commands: `make run` (set up and start the app) and `make test` (set up and run the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)

.PHONY: run test test-fast install system-deps vllm-env gpu-env bench clean tensorboard

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP)

# bubblewrap (sandbox isolation) and Debian's chromium (browser tests), when missing and possible.
system-deps:
	@bash scripts/system-deps.sh

# The vLLM engine's own environment (sampling.engine: vllm); `make test` builds it so its tests run.
vllm-env:
	@bash scripts/vllm_env/setup.sh

# The GPU worker's kernels (requirements-gpu.txt: torch 2.13.0 with its triton 3.7.1, flash-linear-attention) into
# .venv, then what the kernel preflight says of this machine. CONV1D=1 also builds causal-conv1d (needs nvcc).
gpu-env: install
	$(PY) -m pip install -q -r requirements-gpu.txt
	@if [ "$(CONV1D)" = "1" ]; then $(PY) -m pip install -q --no-build-isolation causal-conv1d==1.7.0; fi
	$(PY) -m training.kernels --require-cuda

# `make run VERBOSE=1`: every service's log lines in the terminal too (they are always in DATA_DIR/logs/).
run: install system-deps
	CRUCIBLE_VERBOSE=$(VERBOSE) $(PY) -m webapp.launcher

# TensorBoard over every run's RUN_DIR/tensorboard (runs with tracking.tensorboard: true), on 127.0.0.1 only (it has
# no login): `make -j2 run tensorboard` starts it beside the app, `make tensorboard` on its own in another terminal.
TENSORBOARD_PORT ?= 6006
tensorboard: install
	$(PY) -m tensorboard.main --logdir "$${CRUCIBLE_DATA_DIR:-var}/runs" --host 127.0.0.1 --port $(TENSORBOARD_PORT)

test: install system-deps vllm-env
	$(PY) -m pytest $(PYTEST_ARGS)

# The fast subset (no test that starts a service process) on two pytest-xdist workers, each with its
# own data dir, SQLite and embedded Redis (tests/xdist_workers.py); not under REDIS_URL/DATABASE_URL.
test-fast: install system-deps
	$(PY) -m pytest -m "not e2e" -n 2 -p tests.xdist_workers $(PYTEST_ARGS)

bench: install
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) .venv-vllm var
