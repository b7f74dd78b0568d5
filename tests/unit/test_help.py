"""python -m packexp --help, and --help GROUP, as a user runs them (in this process:
``packexp.testing.command``): no TensorFlow imported (``markers_tell_the_truth``), every
note whole."""

from __future__ import annotations

import re
import sys

import pytest

from packexp.app.help import NOTE_COLUMN, WIDTH, help_argv, key_notes
from packexp.testing.command import Result, run_command
from packexp.testing.config import ROOT

STRATEGIES = sorted(p.stem for p in (ROOT / "conf" / "strategy").glob("*.yaml"))


@pytest.fixture(scope="module")
def default_help(tmp_path_factory) -> Result:
    return run_command("--help", cwd=tmp_path_factory.mktemp("help"))


def line_of(text: str, key: str) -> str:
    """The first line of the help's config section that starts with ``key:``, indented or
    not."""
    config = text.partition("== Config ==")[2]
    found = re.search(rf"^ *{re.escape(key)}:.*$", config, re.MULTILINE)
    assert found, f"no line for {key} in:\n{text}"
    return found.group(0)


def test_help_shows_resolved_values_each_with_its_comment(default_help):
    out = default_help
    assert out.returncode == 0, out.stderr[-2000:]
    assert "${default:" not in out.stdout
    assert "packexp: packed Hyperband" in out.stdout  # conf/config.yaml's header and footer
    assert "Outputs: results.json and plan.json" in out.stdout
    assert "# Most members in one pack" in line_of(out.stdout, "max_members")
    assert line_of(out.stdout, "eta").startswith("  eta: 3 ")
    assert "# Each rung keeps the best 1/eta" in line_of(out.stdout, "eta")
    # A ${default:} key without a comment: its argument's entry in the builder's docstring.
    assert re.fullmatch(r" +width: 64 +# Units per hidden layer\.", line_of(out.stdout, "width"))
    assert "# cost: Measured packing" in line_of(out.stdout, "strategy")
    assert max(map(len, out.stdout.splitlines())) <= WIDTH


def test_help_lists_the_groups(default_help):
    assert default_help.returncode == 0, default_help.stderr
    for group in ("model", "dataset", "search_space", "strategy", "scheduler", "tracking",
                  "experiment"):
        assert f"{group}:" in default_help.stdout


def test_help_after_overrides_shows_the_chosen_options_keys(tmp_path):
    out = run_command("strategy=knn", "scheduler.R=27", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "# knn: The paper's kNN packing" in line_of(out.stdout, "strategy")
    assert re.match(r" +threshold: null +# Largest L1 distance", line_of(out.stdout, "threshold"))
    assert line_of(out.stdout, "R").startswith("  R: 27 ")


def test_help_imports_no_tensorflow_nor_the_targets_of_its_defaults(tmp_path):
    # The targets of ${default:} (a profile, with TensorFlow) are read from their source
    # (``packexp.config.sources``), not imported. (Where an earlier test of this process
    # loaded them, ``markers_tell_the_truth`` and this check pass alike.)
    heavy = ("tensorflow", "packexp.profile.num_models")
    before = {m for m in heavy if m in sys.modules}
    out = run_command("--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.match(r" +num_models: \[1, 2, 4, 8\] +# Values of N", line_of(out.stdout,
                                                                       "num_models"))
    assert {m for m in heavy if m in sys.modules} == before


def notes_of(text: str) -> dict[str, str]:
    """Each key line's note with its continuation lines (``# ...`` in the notes' column)."""
    notes: dict[str, str] = {}
    key = None
    for line in text.partition("== Config ==")[2].splitlines():
        if line.startswith(" " * NOTE_COLUMN + "# ") and key is not None:
            notes[key] += " " + line.strip().removeprefix("# ")
        elif (found := re.match(r"( *[\w.]+):.*?  # (.*)$", line)) is not None:
            key = found.group(1)
            notes[key] = found.group(2)
        else:
            key = None
    return notes


def test_help_notes_are_whole_sentences_never_cut(default_help):
    notes = notes_of(default_help.stdout)
    conf = key_notes((ROOT / "conf" / "config.yaml").read_text())
    for line_key, key in [("seed", "seed"), ("budget", "budget"), ("  time_s", "budget.time_s"),
                          ("  fusion", "pack.fusion"), ("keep_models", "keep_models")]:
        assert " ".join(notes[line_key].split()) == " ".join(conf[key].split()), key
    assert notes["seed"] == ("Root seed: derives the data split, the sampling, each trial's "
                             "initial weights and data order, and the strategy's random choices.")
    assert not any(note.endswith(" ...") for note in notes.values())
    assert max(map(len, default_help.stdout.splitlines())) <= WIDTH


def test_help_of_a_group_wraps_a_long_note_whole(tmp_path):
    out = run_command("--help", "scheduler", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    asha = out.stdout.partition("  asha")[2].partition("\n  hyperband")[0]
    assert " ..." not in asha
    assert " ".join(asha.split()).endswith('(README, "Asynchronous halving").')
    assert max(map(len, out.stdout.splitlines())) <= WIDTH


def test_help_of_a_group_describes_each_option(tmp_path):
    out = run_command("--help", "strategy", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    options = re.findall(r"^  (\w+) +(\*?) +(\S.*)$", out.stdout, re.MULTILINE)
    assert [name for name, _, _ in options] == STRATEGIES
    assert {"none", "batch_size", "random", "knn", "cost"} <= set(STRATEGIES)
    assert [name for name, chosen, _ in options if chosen] == ["cost"]
    notes = {name: note for name, _, note in options}
    assert notes["none"] == "No packing: every trial trains alone (the original Hyperband)."
    assert notes["knn"].startswith("The paper's kNN packing")


def test_help_of_a_group_after_overrides_marks_their_choice(tmp_path):
    out = run_command("scheduler=asha", "--help", "scheduler", "tracking", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"^  asha +\* Asynchronous successive halving", out.stdout, re.MULTILINE)
    assert re.search(r"^  mlflow +\* MLflow", out.stdout, re.MULTILINE)


def test_help_of_an_unknown_group_is_one_line_and_exit_2(tmp_path):
    out = run_command("--help", "nosuch", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip() == ("packexp: error: --help nosuch: no config group 'nosuch' "
                                  "(python -m packexp --help lists them)")


@pytest.mark.parametrize(("argv", "expected"), [
    (["--help"], ["--help"]),
    (["strategy=knn", "--help"], ["strategy=knn", "--help"]),
    (["strategy"], ["strategy"]),  # no --help: Hydra's own error
    (["--help", "strategy"], ["--help", "hydra.help.template=${help.options:'strategy'}"]),
    (["scheduler=asha", "-h", "scheduler", "model"],
     ["hydra.help.template=${help.options:'scheduler','model'}", "scheduler=asha", "-h"]),
])
def test_help_argv_turns_group_names_into_one_override(argv, expected):
    assert help_argv(argv) == expected
