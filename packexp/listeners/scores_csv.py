"""A listener that writes every member's score, as it comes, to a CSV in the run directory.

Add it with ``+listeners.scores._target_=packexp.listeners.scores_csv.ScoresCsv`` (README,
"Listeners"); it is the example of a listener of one's own.
"""

from __future__ import annotations

import csv
from pathlib import Path

from packexp.events import Listener, MemberScored

COLUMNS = ("trial_id", "bracket", "rung", "epochs", "val_accuracy", "val_loss", "pack_id")


class ScoresCsv(Listener):
    """Appends one row per scored member to ``run_dir/<name>``, flushed as it is written.

    Args:
        run_dir: The run directory (every listener is given it).
        name: The file's name.
    """

    def __init__(self, run_dir: Path, name: str = "scores.csv") -> None:
        self.path = Path(run_dir) / name

    def on_member_scored(self, event: MemberScored) -> None:
        row = event.result.to_dict()
        new = not self.path.exists()  # a resumed run appends to its file
        with self.path.open("a", newline="") as f:
            if new:
                csv.writer(f).writerow(COLUMNS)
            csv.writer(f).writerow([row[c] for c in COLUMNS])
