# Leroy: `make demo` serves a complete local instance; `make test` runs the whole suite.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint

$(STAMP): pyproject.toml constraints.txt
	@if ! $(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then \
		rm -rf $(VENV); python=$$(bin/find-python) && echo "creating $(VENV) with $$python" && "$$python" -m venv $(VENV); \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

test: $(STAMP)
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports
