"""Test doubles and small data for packexp's tests (and a user's own), each defined once.

``fake_trainer``: the driver on a trainer without TensorFlow; ``fake_search``: the search a
population scheduler drives; ``asha``: the ASHA paper's rule
as a check on a journal; ``data``: small datasets, in memory and as files; ``fixtures``: the
pytest fixtures built on them (``pytest_plugins = ["packexp.testing.fixtures"]``).
Importing this package imports neither TensorFlow nor pytest.
"""
