"""A cost-weighing strategy's calibration, kept or measured: the run's own copy first (a
resumed run plans as before), then one kept across runs for the same facts, else measured on
the device (``packexp/packing/calibrate.py`` measures; ``CostStrategy.prepare`` asks)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from packexp.errors import ConfigError
from packexp.files import write_json

log = logging.getLogger(__name__)

RUN_FILE = "calibration.json"  # the run directory's copy
LIMIT_S = 15.0  # a calibration measures nothing new once it has run this long
FALLBACK = "knn"  # what a strategy plans as where no calibration fits in LIMIT_S


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


def calibration_digest(record: Mapping[str, Any]) -> str:
    """A short digest of a calibration's whole content: two records plan alike iff equal."""
    text = json.dumps(dict(record), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PackTiming:
    """One pack a calibration measured as the search's engine runs it: its set-up (tracing,
    and compiling where it compiles; None where it reused a program), its step time without
    a call's fixed cost (``call_s``), and an evaluation's time."""

    fusion: str  # "on" (fused) or "off"
    batches: tuple[int, ...]
    step_s: float
    call_s: float
    setup_s: float | None
    eval_s: float
    steps: tuple[int, ...] = ()  # the chunk lengths timed
    xla: bool = False
    looped: bool = False


@dataclass(frozen=True)
class CycleTiming:
    """A single trained one epoch as the search trains a pack, timed whole."""

    batches: tuple[int, ...]
    steps: tuple[int, ...]
    traced: bool
    duration_s: float


@dataclass(frozen=True)
class Measurement:
    """What a calibration measured on a device (``packing.calibrate.calibrate``), typed;
    ``to_dict`` and ``from_dict`` are the calibration file's one format.

    Attributes:
        packs: Each pack measured.
        cycles: Singles timed whole (``pack_s``'s data).
        build_s, load_s, checkpoint_s: A member built afresh; a state loaded into a built
            one; a member's state written.
        chunk_steps: Steps per call of the step function, as the calibration ran.
        settings: The pack settings it ran under, and what it found (``looped``,
            ``fusable``, ``bucketed``, ``batch_bucket``).
        seconds: How long it took.
    """

    packs: tuple[PackTiming, ...]
    cycles: tuple[CycleTiming, ...]
    build_s: float
    load_s: float
    checkpoint_s: float
    chunk_steps: int
    settings: Mapping[str, Any]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"packs": [_plain(p) for p in self.packs],
                "cycles": [_plain(c) for c in self.cycles], "build_s": self.build_s,
                "load_s": self.load_s, "chunk_steps": self.chunk_steps,
                "checkpoint_s": self.checkpoint_s, "settings": dict(self.settings),
                "seconds": self.seconds}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Measurement:
        """A calibration record read back (a ``KeyError`` or ``TypeError`` if it is not one)."""
        def typed(kind: type, row: Mapping[str, Any]) -> Any:
            names = {f.name for f in fields(kind)}
            return kind(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in row.items() if k in names})

        return cls(tuple(typed(PackTiming, r) for r in record["packs"]),
                   tuple(typed(CycleTiming, c) for c in record.get("cycles", ())),
                   float(record["build_s"]), float(record["load_s"]),
                   float(record["checkpoint_s"]), int(record["chunk_steps"]),
                   dict(record["settings"]), float(record.get("seconds", 0.0)))


def _plain(row: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(row).items()}


@dataclass(frozen=True)
class Calibration:
    """The calibration a run plans with, and where it came from.

    Attributes:
        record: The calibration (``packing.calibrate.calibrate``'s record, with its key and
            facts).
        source: ``measured`` (now), ``run`` (the run directory's copy: a resume),
            ``kept`` (``calibration_dir``) or ``file`` (``strategy.calibration``).
        path: The file it was read from; for one measured now, the run directory's copy.
        checked: What ``check`` returned for a record read back (the fitted cost model);
            None for one measured now.
    """

    record: dict
    source: str
    path: Path
    checked: Any = None

    @property
    def measured(self) -> bool:
        return self.source == "measured"

    def summary(self) -> dict[str, str]:
        """What ``results.json`` and the tracker record: key, digest, source and path."""
        return {"key": str(self.record.get("key")), "digest": calibration_digest(self.record),
                "source": self.source, "path": str(self.path)}


def calibration_for(device: Any, named: str | None, kept_dir: str | None, fresh: bool,
                    check: Callable[[dict], Any]) -> Calibration:
    """The calibration a strategy plans with on ``device`` (``strategies.base.Device``): the
    file ``named`` (``strategy.calibration``; one that cannot be used is a ``ConfigError``
    naming it), else the run's own, a kept one under ``kept_dir`` or one measured now."""
    run_file = device.run_dir / RUN_FILE
    if not named:
        return load_or_calibrate(run_file, kept_directory(kept_dir), device.facts(),
                                 device.measure, fresh=fresh, check=check)
    pinned = kept_directory(named)
    try:
        return load_pinned(pinned, run_file, device.facts(), check)
    except ValueError as e:
        raise ConfigError(f"strategy.calibration={named}: {pinned}: {e}") from None


def load_or_calibrate(run_file: Path, kept_dir: Path | None, facts: Mapping[str, Any],
                      measure: Callable[[], dict], fresh: bool = False,
                      check: Callable[[dict], Any] = lambda record: None) -> Calibration:
    """The calibration for ``facts``: the run's own, a kept one, or one measured now.

    A file that cannot be read, or that ``check`` refuses (it raises), is passed over with
    one warning naming it, and a calibration measured now replaces it.

    Args:
        run_file: The run directory's copy (read first: a resumed run plans as before).
        kept_dir: Where calibrations are kept across runs; None keeps none.
        facts: What the calibration depends on (device, structure, settings).
        measure: Measures a calibration.
        fresh: Measure even where a kept one matches (a resumed run still reads its own).
        check: Raises if a record cannot be planned with (the cost model's fit).
    """
    key = calibration_key(facts)
    candidates = [(run_file, "run")] + ([] if fresh or kept_dir is None
                                        else [(kept_dir / f"{key}.json", "kept")])
    for path, source in candidates:
        if not path.exists():
            continue
        try:
            record, checked = read_calibration(path, check)
        except ValueError as e:
            log.warning("calibration %s: %s; measuring again", path, e)
            continue
        if record.get("key") == key:
            log.info("calibration: %s", path)
            write_json(run_file, record)
            return Calibration(record, source, path, checked)
        if path == run_file:
            log.warning("calibration %s is for other settings; measuring again", path)
    log.info(calibrating_line(kept_dir / f"{key}.json" if kept_dir is not None else None))
    record = {"key": key, "facts": dict(facts), **measure()}
    write_json(run_file, record)
    if kept_dir is not None:
        write_json(kept_dir / f"{key}.json", record)
    return Calibration(record, "measured", run_file)


def calibrating_line(kept: Path | None) -> str:
    """What a run that measures a calibration says first: how long, and where it is kept."""
    where = (f"kept in {kept} for every later search of this model and data shape on this "
             "device, from any directory" if kept is not None
             else "kept in the run directory only (strategy.calibration_dir=null)")
    return (f"cost model: calibrating on this device, once: at most about {LIMIT_S:g} s "
            f"(else it plans as strategy={FALLBACK}); {where}")


def load_pinned(path: Path, run_file: Path, facts: Mapping[str, Any],
                check: Callable[[dict], Any]) -> Calibration:
    """``strategy.calibration``: the named file, whatever device it was measured on (the
    run's copy of it on a resume). A file that cannot be used is a ``ValueError``; facts that
    differ from this device's are one warning naming them."""
    source, read_from = ("run", run_file) if run_file.exists() else ("file", path)
    if not read_from.exists():
        raise ValueError("no such file")
    record, checked = read_calibration(read_from, check)
    differ = sorted(k for k in set(facts) | set(record.get("facts", {}))
                    if record.get("facts", {}).get(k) != facts.get(k))
    if differ:
        log.warning("calibration %s was measured for other facts (%s differ); planning with "
                    "it as named", read_from, ", ".join(differ))
    write_json(run_file, record)
    return Calibration(record, source, read_from, checked)


def read_calibration(path: Path, check: Callable[[dict], Any]) -> tuple[dict, Any]:
    """The record in ``path`` and what ``check`` made of it; a ``ValueError`` saying why it
    cannot be planned with."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"unreadable ({type(e).__name__}: {e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON, perhaps cut short ({e})") from None
    if not isinstance(record, dict):
        raise ValueError("not a calibration (no JSON object)")
    try:
        checked = check(record)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"not a calibration packexp can read ({type(e).__name__}: "
                         f"{e})") from None
    return record, checked
