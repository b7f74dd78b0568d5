"""Test doubles, small data and the helpers packexp's tests share (and a user's own), each
defined once.

- ``fake_trainer``: the runner's search on a pack trainer without TensorFlow
  (``FakeTrainer``, also ``packexp.testing.FakeTrainer``);
- ``policies``: a scheduler's decisions without a search (``simulate``);
- ``asha``: the ASHA paper's promotion rule, as a check on a journal;
- ``data``: small datasets, in memory and as files in each format packexp reads;
- ``config``: the checkout and its configs (``ROOT``, ``CONF_DIR``), a test's composed config
  (``compose_config``);
- ``command``: ``python -m packexp`` in a child process (``packexp``) or in this one
  (``run_command``);
- ``mlflow_ui``: the MLflow UI served on loopback and driven in headless Chromium;
- ``searches``: a whole search in this process (``search``, ``search_command``,
  ``search_on_fake``) and the models it kept (``kept_models``);
- ``members``: tiny trials and pack members (``CONFIGS``, ``PLAIN``, ``trial``, ``members``),
  a pack cache of them, their weights compared exactly;
- ``models``: small Keras models of a user's kind and what tests count in them;
- ``calibration``: a fake device's calibration record (``device``);
- ``processes``: a free port, a Ray's processes, a condition polled (``wait_until``);
- ``fixtures``: the pytest fixtures on them (``pytest_plugins = ["packexp.testing.fixtures"]``).

Importing the package, or any module but ``fixtures``, imports neither TensorFlow nor pytest
(the modules that build a model import Keras inside their functions).
"""

__all__ = ["FakeTrainer"]


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


def __getattr__(name: str):
    # ``packexp.testing.FakeTrainer``, as the docs name it: imported when asked for, so that
    # importing the package stays as light as the docstring says.
    if name == "FakeTrainer":
        from packexp.testing.fake_trainer import FakeTrainer

        return FakeTrainer
    raise AttributeError(name)
