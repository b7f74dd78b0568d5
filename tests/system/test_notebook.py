"""examples/notebook.ipynb, executed headless in a Jupyter kernel as a user would run it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from packexp.testing.config import ROOT

NOTEBOOK = ROOT / "examples" / "notebook.ipynb"


def outputs(cell) -> dict[str, str]:
    """A cell's outputs by MIME type (text/plain, text/html, image/png), streams by name,
    and its value's text as ``result``."""
    found: dict[str, str] = {}
    for out in cell.outputs:
        if out.output_type == "stream":
            found[out.name] = found.get(out.name, "") + out.text
        if out.output_type == "execute_result":
            found["result"] = out.data["text/plain"]
        for mime, value in out.get("data", {}).items():
            found[mime] = found.get(mime, "") + (value if isinstance(value, str)
                                                 else json.dumps(value))
    return found


def code_cell(nb, starts_with: str):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts_with))


@pytest.mark.slow
@pytest.mark.tf
def test_the_example_notebook_runs_and_shows_its_tables_and_plot(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("PACKEXP_HOME", str(tmp_path / "home"))  # the kernel's environment
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    best = ast.literal_eval(outputs(code_cell(nb, "result = packexp.tune("))["result"])
    assert best["val_accuracy"] > 0.85  # breast cancer: most configurations reach 0.9+
    assert set(best["hparams"]) == {"batch_size", "optimizer", "learning_rate", "activation",
                                    "width"}
    trials = outputs(code_cell(nb, "result.trials"))
    assert "<table" in trials["text/html"] and "val_accuracy" in trials["text/html"]
    packs = outputs(code_cell(nb, "result.packs"))
    assert "<table" in packs["text/html"] and "train_s" in packs["text/html"]
    assert "image/png" in outputs(code_cell(nb, "result.plot()"))
    last = outputs(code_cell(nb, "again = packexp.load"))
    assert last["result"] == "True"
    run_dir = Path(last["stdout"].splitlines()[0])
    assert run_dir.parent == tmp_path / "home" / "runs"  # not the working directory's
    assert not (tmp_path / "outputs").exists()
    assert (run_dir / "results.json").is_file()
    assert len(last["stdout"].splitlines()[1].split(": ")[1]) == 32  # an MLflow run id
    assert all(o.output_type != "error" for c in nb.cells if c.cell_type == "code"
               for o in c.outputs)
