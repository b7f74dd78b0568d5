VENV ?= .venv
# pytest-xdist workers: one per CPU; PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= auto
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-system test-pure test-paper-cnns coverage lint docs clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev,ray,docs]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m packexp $(ARGS)

# The unit and engine layers (docs/testing.md): tests/unit (pure Python) and tests/engine
# (TensorFlow in this process), less the system layer (a test that starts a process) and the
# paper's full-size CNNs (their own steps: test-system, test-paper-cnns). xdist hands each
# module to one worker, so a module's fixtures (a whole search, a trained pack) are built
# once, in the order tests/conftest.py gives (the costliest modules first), not xdist's own.
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder \
		-m "not system and not paper_cnns" --durations=15 tests/unit tests/engine $(PYTEST_ARGS)

# The system layer: processes (python -m packexp, scripts, the MLflow writer), Ray clusters
# and MLflow servers; tests/system and the tests marked process or slow elsewhere.
test-system: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder \
		-m "system and not paper_cnns" --durations=15 tests $(PYTEST_ARGS)

# Line coverage of packexp/ by make test's and make test-system's selections together, in the
# test processes (docs/testing.md, "Coverage"): a table of the files not fully covered, and
# coverage.json for comparisons.
coverage: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder \
		-m "not paper_cnns" --cov=packexp --cov-report=term:skip-covered \
		--cov-report=json:coverage.json tests $(PYTEST_ARGS)

# The pure layer: tests/unit, no TensorFlow model, no process started (docs/testing.md).
test-pure: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -m "not system" tests/unit $(PYTEST_ARGS)

# The isolation checks on the paper's CNNs: MobileNetV2 packed, looped and fused against each
# member alone, and MobileNetV2, ResNet-50 and DenseNet-121 in one pack (minutes on a CPU).
# With oneDNN's custom operations on, whatever the CPU (the suite runs with them off,
# tests/conftest.py): the fused MobileNetV2 then takes both grouped-convolution paths.
test-paper-cnns: $(STAMP)
	TF_ENABLE_ONEDNN_OPTS=1 $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder \
		-m paper_cnns --durations=10 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

# The manual (docs/, mkdocs.yml) as a site in site/; --strict: a broken link fails the build.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) outputs/* multirun .pytest_cache build dist site *.egg-info coverage.json .coverage .coverage.*
	touch outputs/.gitkeep
