VENV ?= .venv
# pytest-xdist workers: one per CPU; PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= auto
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint docs clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev,ray,docs]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m packexp $(ARGS)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --durations=15 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

# The manual (docs/, mkdocs.yml) as a site in site/; --strict: a broken link fails the build.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) outputs/* multirun .pytest_cache build dist site *.egg-info
	touch outputs/.gitkeep
