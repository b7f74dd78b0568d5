"""A cost-weighing strategy's calibration, kept or measured: the run's own copy first (a
resumed run plans as before), then one kept across runs for the same facts, else measured on
the device (``packexp/packing/calibrate.py`` measures; ``CostStrategy.prepare`` asks)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packexp.files import write_json

log = logging.getLogger(__name__)

RUN_FILE = "calibration.json"  # the run directory's copy


def calibration_key(facts: Mapping[str, Any]) -> str:
    """A short, stable digest of what a calibration depends on (its version included)."""
    text = json.dumps(dict(facts), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def kept_directory(directory: str | None) -> Path | None:
    """``calibration_dir`` as a path: relative to where the command started."""
    if not directory:
        return None
    from hydra.utils import to_absolute_path

    return Path(to_absolute_path(str(directory)))


def load_or_calibrate(run_file: Path, kept_dir: Path | None, facts: Mapping[str, Any],
                      measure: Callable[[], dict], fresh: bool = False) -> tuple[dict, bool]:
    """The calibration for ``facts``: the run's own, a kept one, or one measured now.

    Args:
        run_file: The run directory's copy (read first: a resumed run plans as before).
        kept_dir: Where calibrations are kept across runs; None keeps none.
        facts: What the calibration depends on (device, structure, settings).
        measure: Measures a calibration.
        fresh: Measure even where a kept one matches (a resumed run still reads its own).

    Returns:
        The calibration, and whether it was measured now.
    """
    key = calibration_key(facts)
    candidates = [run_file] + ([] if fresh or kept_dir is None
                               else [kept_dir / f"{key}.json"])
    for path in candidates:
        if path.exists():
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                log.warning("calibration %s is unreadable (%s); measuring again", path, e)
                continue
            if record.get("key") == key:
                log.info("calibration: %s", path)
                write_json(run_file, record)
                return record, False
            if path == run_file:
                log.warning("calibration %s is for other settings; measuring again", path)
    record = {"key": key, "facts": dict(facts), **measure()}
    write_json(run_file, record)
    if kept_dir is not None:
        write_json(kept_dir / f"{key}.json", record)
    return record, True
