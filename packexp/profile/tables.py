"""A profile's table: ``profile.csv``, written and read back with numbers as numbers."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.records.report import cell

CSV_NAME = "profile.csv"


def write_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], path: Path) -> Path:
    """Writes ``rows`` with ``columns`` (in that order; missing values left empty)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: cell(row.get(k)) for k in columns})
    return path


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``profile.csv``, with numbers parsed back into numbers."""
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _parse(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text if text != "" else None
