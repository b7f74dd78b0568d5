"""packexp/testing/command.py: ``python -m packexp`` run in this process says what the child
process says, and leaves the process as it found it."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import warnings

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from packexp.app import help
from packexp.testing.command import _exit_status, run_command
from packexp.testing.config import CONF_DIR, ROOT

REFUSED = ("seed=-1", "tracking=none")


def test_help_is_exit_0_and_its_text_on_stdout(tmp_path):
    out = run_command("--help", "strategy", cwd=tmp_path)
    assert (out.args, out.returncode, out.stderr) == (("--help", "strategy"), 0, "")
    assert out.stdout.startswith("strategy: choose one with strategy=OPTION")


def test_a_refusal_is_exit_2_and_one_line_naming_the_key(tmp_path):
    out = run_command(*REFUSED, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.startswith("packexp: error: seed=-1: must be an integer"), out.stderr
    assert out.stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())  # in cwd, where the run directory would have gone


def test_hydra_s_error_is_its_report_not_a_traceback(tmp_path):
    out = run_command("+seed=1", cwd=tmp_path)  # a typo's is packexp's line (test_typos.py)
    assert out.returncode == 1
    assert out.stderr.startswith("Could not append to config. An item is already at 'seed'.")
    assert "Traceback" not in out.stderr


def process_state() -> dict:
    return {"hydra": GlobalHydra.instance().is_initialized(),
            "hydra_config": HydraConfig.instance().cfg, "cwd": os.getcwd(),
            "signals": [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)],
            "unraisablehook": sys.unraisablehook, "argv": list(sys.argv),
            "environ": dict(os.environ), "streams": (sys.stdout, sys.stderr),
            "root_logger": (logging.root.level, list(logging.root.handlers)),
            "warnings": (list(warnings.filters), warnings.showwarning)}


@pytest.mark.parametrize("args", [REFUSED, ("--help", "strategy"), ("strategy=best_fit",),
                                  ("+seed=1",)])
def test_the_process_is_left_as_it_was(tmp_path, args):
    before = process_state()
    run_command(*args, cwd=tmp_path)
    assert process_state() == before


def test_two_calls_in_a_row_say_the_same(tmp_path):
    first, second = run_command(*REFUSED, cwd=tmp_path), run_command(*REFUSED, cwd=tmp_path)
    assert first == second
    assert run_command("--help", "strategy", cwd=tmp_path).returncode == 0


def test_a_caller_s_hydra_is_put_back(tmp_path):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        outer = GlobalHydra.instance().hydra
        out = run_command(*REFUSED, cwd=tmp_path)
        assert GlobalHydra.instance().hydra is outer
    assert out.returncode == 2


def test_the_caller_s_log_is_captured_after(tmp_path, caplog):
    run_command(*REFUSED, cwd=tmp_path)  # Hydra's logging takes the root logger meanwhile
    logging.getLogger("packexp").warning("after the command")
    assert "after the command" in caplog.text


def test_an_interrupt_is_raised_to_the_caller(tmp_path, monkeypatch):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(help, "help_argv", interrupted)
    before = process_state()
    with pytest.raises(KeyboardInterrupt):
        run_command(*REFUSED, cwd=tmp_path)
    assert process_state() == before


def test_a_warning_is_on_stderr_as_a_fresh_interpreter_shows_it(tmp_path, monkeypatch):
    def warning(argv):
        warnings.warn("a library's warning", UserWarning, stacklevel=1)
        return argv

    monkeypatch.setattr(help, "help_argv", warning)
    out = run_command(*REFUSED, cwd=tmp_path)
    assert "UserWarning: a library's warning" in out.stderr
    assert out.stderr.splitlines()[-1].startswith("packexp: error: seed=-1")


@pytest.mark.process
@pytest.mark.parametrize("code", [None, 0, 3, "a message"])
def test_an_exit_code_is_python_s(code):
    done = subprocess.run([sys.executable, "-c", f"raise SystemExit({code!r})"],
                          capture_output=True, text=True, timeout=60)
    stderr = io.StringIO()
    assert _exit_status(code, stderr) == done.returncode
    assert stderr.getvalue() == done.stderr


@pytest.mark.process
def test_importing_it_imports_neither_tensorflow_nor_pytest():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, packexp.testing.command; "
                               "from packexp.testing import FakeTrainer; "  # as docs name it
                               "print(sorted({'tensorflow', 'pytest'} & set(sys.modules)))"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_handler_no_logger_holds_cannot_close_the_callers_stream(monkeypatch):
    """Hydra's logging set-up shuts every live handler down; absl's (TensorFlow's) closes its
    stream unless it is ``sys.stderr`` at that moment. The caller's stream stays open."""
    import io
    import logging

    class ClosesItsStream(logging.StreamHandler):  # as absl's PythonHandler does
        def close(self):
            if self.stream not in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__):
                self.stream.close()
            super().close()

    callers = io.StringIO()
    monkeypatch.setattr(sys, "stderr", callers)
    handler = ClosesItsStream(callers)  # held by no logger, alive in logging's list
    result = run_command(*REFUSED)
    assert result.returncode == 2
    assert not callers.closed and handler.stream is callers
