"""What a process imports (a fresh interpreter each): a search on a trainer without TensorFlow
loads neither TensorFlow nor Keras, through the config as through ``packexp.tune``; the
command's interrupt handling imports before Hydra or YAML; the config's checks (bad settings,
the default config, a resume's check before Hydra writes) run before TensorFlow, Keras or
SciPy's ``optimize`` load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from packexp.testing.config import CONF_DIR, ROOT, compose_config

FAKE_SEARCH = """
import os, sys
os.environ["PACKEXP_HOME"] = sys.argv[1]
import packexp
from packexp.testing import FakeTrainer
result = packexp.tune("mlp3", "digits", trainer=FakeTrainer(), strategy="knn", tracking="none",
                      run_dir=sys.argv[1] + "/run", overrides=["scheduler.R=9"])
assert result.best is not None
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")))
"""


@pytest.mark.process
def test_a_fake_search_through_the_config_imports_neither_tensorflow_nor_keras(tmp_path):
    # The config's checks (preprocessing, ${default:} values read from source) need neither.
    done = subprocess.run([sys.executable, "-c", FAKE_SEARCH, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


COMMAND = """
import atexit, sys
atexit.register(lambda: print("loaded:", sorted(
    m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))))
sys.argv = ["packexp", *sys.argv[1:]]
from packexp.__main__ import run
run()
"""


@pytest.mark.process
def test_a_simulated_cluster_from_the_command_line_starts_no_tensorflow(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, "executor=simulated", "strategy=knn", "tracking=none",
         "scheduler.R=9", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "results.json").is_file()
    assert done.stdout.strip().splitlines()[-1] == "loaded: []", done.stdout[-2000:]


# The command line: its interrupt handling, and the settings it refuses before TensorFlow.

CHECK_WITHOUT_TENSORFLOW = """
import sys
from packexp.errors import ConfigError
from packexp.app.main import check
from packexp.testing.config import compose_config

check(compose_config(["experiment=quick"]))  # a good config passes
try:
    check(compose_config(["experiment=quick", sys.argv[1]]))
except ConfigError as e:
    print(e)
print("tensorflow" in sys.modules)
"""


@pytest.mark.process
def test_the_commands_interrupt_handling_imports_before_hydra_or_yaml():
    # python -m packexp installs its Ctrl-C handling before Hydra imports (packexp/__main__.py):
    # a module it imports that loads YAML or OmegaConf leaves an interrupt there a traceback.
    out = subprocess.run([sys.executable, "-c", "import sys, packexp.app.interrupts; print("
                          "sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', "
                          "'omegaconf', 'hydra', 'antlr4', 'tensorflow', 'mlflow')))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.process
@pytest.mark.parametrize("override", ["scheduler.R=0", "pack.max_members=0",
                                      "search_space.params.optimizer=[sgdx]"])
def test_bad_search_settings_are_found_before_tensorflow_loads(override):
    out = subprocess.run([sys.executable, "-c", CHECK_WITHOUT_TENSORFLOW, override], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    message, loaded = out.stdout.strip().splitlines()
    assert message.startswith(override.split("=")[0])
    assert loaded == "False"


# The config's checks, and the pack engine's settings, without TensorFlow or SciPy's optimize.

@pytest.mark.process
def test_the_config_checks_import_no_tensorflow():
    code = ("import sys, packexp.config, packexp.space.options; "
            "sys.exit('tensorflow' in sys.modules or 'keras' in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=Path(__file__).resolve().parents[2])


@pytest.mark.process
def test_the_default_config_is_checked_before_tensorflow_and_scipy_s_optimize_load():
    """``python -m packexp`` checks the config (instantiating the default ``strategy=cost``)
    before TensorFlow starts, and TensorFlow's start loads SciPy's ``optimize``: imported
    before it, it cost the command 0.47 CPU-s more (docs/BENCHMARKS.md)."""
    code = ("import sys\n"
            "from hydra import compose, initialize_config_dir\n"
            "with initialize_config_dir(config_dir=sys.argv[1], version_base=None):\n"
            "    cfg = compose('config')\n"
            "from packexp.app.main import check\n"
            "check(cfg)\n"
            "print(sorted({'tensorflow', 'keras', 'scipy.optimize'} & set(sys.modules)))")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code, str(root / "conf")], check=True,
                         cwd=root, capture_output=True, text=True)
    assert out.stdout.split() == ["[]"], out.stdout


# A resume, checked before Hydra writes, without Keras.

RESUME_CHECK = """
import sys
from hydra import compose, initialize_config_dir
from packexp.config import register_resolvers
from packexp.errors import ConfigError
from packexp.app.session import refuse_run_dir

register_resolvers()
with initialize_config_dir(config_dir=sys.argv[1], version_base="1.3"):
    overrides = [*sys.argv[3:], "resume=true", f"hydra.run.dir={sys.argv[2]}"]
    cfg = compose("config", overrides=overrides, return_hydra_config=True)
try:
    refuse_run_dir(cfg)
    print("accepted")
except ConfigError as e:
    print("refused:", e)
print("keras imported:", "keras" in sys.modules)
"""


@pytest.mark.process
@pytest.mark.parametrize(("overrides", "verdict"), [
    ([], "accepted"),
    (["seed=6"], "refused: resume=true: seed=6 here, but the journal has seed=5"),
])
def test_a_resume_is_checked_before_hydra_writes_without_importing_keras(tmp_path, overrides,
                                                                          verdict):
    """The Hydra callback that refuses a bad resume resolves the config; the model files'
    ${default:packexp.models.mlp3.build} would import Keras there, before the job starts
    TensorFlow quietly: those keys are left to the job to compare."""
    import subprocess
    import sys

    from packexp.app.session import comparable
    from packexp.runner.journal import Journal

    Journal(tmp_path).append("start", config=comparable(compose_config(["seed=5"], strategy=None)),
                             overrides=["seed=5"])
    done = subprocess.run([sys.executable, "-c", RESUME_CHECK, CONF_DIR, str(tmp_path), "seed=5",
                           *overrides], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0].startswith(verdict), done.stdout + done.stderr
    assert lines[-1] == "keras imported: False"
