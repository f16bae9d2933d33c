# Two commands on a fresh machine: `make nightly` (the main job) and `make test`.
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
PYTHON  ?= python3

.PHONY: nightly test lint typecheck bwrap clean wheel

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# bubblewrap gives the sandbox namespaces; without it candidates run with rlimits only.
bwrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1)) || true; \
	  fi; \
	  command -v bwrap >/dev/null 2>&1 || \
	    echo "note: bubblewrap is not installed; the sandbox runs with reduced isolation"; }

nightly: $(STAMP) bwrap
	$(VENV)/bin/optimizer run experiments/nightly.toml

test: $(STAMP) bwrap lint typecheck
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy optimizer evaluators

# the package for another repository's environment (docs/your-code.md); the test suite
# installs it into a fresh venv (tests/optimizer/test_your_code.py)
wheel: $(STAMP)
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w build/wheel .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
