"""packexp/app/muted.py: TensorFlow's start-up banner held back while it is first imported, a
failing import's lines shown, and the module's loader left as it was."""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import subprocess
import sys

import pytest

from packexp.app import muted


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Two packages that write to file descriptor 2 as they import, one failing; imported
    afresh, and the finder taken out again, by each test."""
    for name, body in [("banner_pkg", "import os\nos.write(2, b'BANNER\\n')\n"),
                       ("failing_pkg", "import os\nos.write(2, b'WHY IT FAILED\\n')\n"
                                       "raise ImportError('a bad build')\n")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    before = list(sys.meta_path)
    yield
    sys.meta_path[:] = before
    for name in ("banner_pkg", "failing_pkg"):
        sys.modules.pop(name, None)


def test_a_first_import_s_writes_are_dropped_after_a_look_for_it(packages, capfd):
    muted.install("banner_pkg")
    assert importlib.util.find_spec("banner_pkg") is not None  # a look, as libraries take
    import banner_pkg

    assert capfd.readouterr().err == ""
    assert type(banner_pkg.__loader__).__name__ == "SourceFileLoader"
    assert banner_pkg.__spec__.loader is banner_pkg.__loader__
    assert importlib.resources.files("banner_pkg").joinpath("__init__.py").is_file()


def test_a_failing_import_shows_its_lines_and_raises(packages, capfd):
    muted.install("failing_pkg")
    with pytest.raises(ImportError, match="a bad build"):
        import failing_pkg  # noqa: F401
    assert capfd.readouterr().err == "WHY IT FAILED\n"


def test_a_user_who_asks_for_tensorflow_s_lines_gets_them(packages, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    muted.install("banner_pkg")
    assert not any(isinstance(f, muted.MutedImportFinder) for f in sys.meta_path
                   if getattr(f, "name", None) == "banner_pkg")


@pytest.mark.process
@pytest.mark.parametrize("user_level", [None, "2", "0"])
def test_importing_packexp_keeps_tensorflow_s_banner_off_unless_the_user_asks(tmp_path,
                                                                             user_level):
    """A user's own ``import keras`` after ``import packexp`` (README, "From Python")."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if user_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = user_level
    done = subprocess.run([sys.executable, "-c", "import packexp, keras; print(keras.Input)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    banner = "absl::InitializeLog" in done.stderr or "cuda drivers" in done.stderr
    assert banner == (user_level == "0"), done.stderr[-2000:]  # 2: set to be quiet
