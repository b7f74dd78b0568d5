"""Test doubles and small data for packexp's tests (and a user's own), each defined once.

- ``fake_trainer``: the runner's search on a pack trainer without TensorFlow;
- ``policies``: a scheduler's decisions without a search (``simulate``);
- ``asha``: the ASHA paper's promotion rule, as a check on a journal;
- ``data``: small datasets, in memory and as files in each format packexp reads;
- ``fixtures``: the pytest fixtures on them (``pytest_plugins = ["packexp.testing.fixtures"]``).

Importing the package, or any module but ``fixtures``, imports neither TensorFlow nor pytest.
"""
