# Two commands: `make run` (set up and start the app) and `make test` (set up and run the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)

.PHONY: run test install system-deps bench clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP)

# bubblewrap (sandbox isolation) and Debian's chromium (browser tests), when missing and possible.
system-deps:
	@bash scripts/system-deps.sh

run: install system-deps
	$(PY) -m webapp.launcher

test: install system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) var
