"""What every task shares: the tracker opened and closed in ``finally`` (a search's run
journaled by its study), a run directory checked before Hydra writes in it, and the clock
``startup_s`` counts from."""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from packexp.config import config_errors, dataset_source, flatten, instantiate
from packexp.errors import ConfigError, refuse
from packexp.events import Summary
from packexp.runner.replay import Recorded
from packexp.tracking import hydra_tags, run_params


@contextmanager
def tracked(cfg: DictConfig, run_dir: Path, *, run_name: str, tags: Mapping[str, str],
            dataset: Any, study: Any = None) -> Iterator[Any]:
    """Opens ``cfg.tracking``'s tracker for one task and ends it however the task ends.

    The run's config, its Hydra files and its log go with it; a search's ``study``
    (``runner.Study``) resumed reattaches it to the run its first session started, and a
    fresh one journals the run it opens, so that a resume can. A job of a multirun adds its
    number after ``run_name``'s first word (``knn-j3-s0-...``), so a sweep's runs have names
    of their own, told apart where the MLflow UI cuts them short.

    Yields:
        The started tracker. It ends ``FINISHED`` when the block completes, ``KILLED`` on
        an interrupt and ``FAILED`` on any other exception.
    """
    tracker = instantiate(cfg.tracking, "tracking")
    sweep = hydra_tags()
    tracker.start(
        run_name=job_named(run_name, sweep.get("job_num")),
        params=run_params(cfg), tags={**tags, **sweep},
        resume_run_id=None if study is None else study.tracking_run_id,
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        dataset=dataset, dataset_source=dataset_source(cfg),
    )
    tracker.on_summary(Summary(artifacts=[(run_dir / ".hydra", "hydra")]))
    if study is not None and tracker.run_id:
        study.track(tracker.run_id)
    status = "FAILED"
    try:
        yield tracker
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.on_summary(Summary(artifacts=[(run_dir / "packexp.log", None)]))
        tracker.end(status)


def job_named(run_name: str, job: str | None) -> str:
    """``run_name`` with a multirun job's number after its first word; as it is outside one."""
    if job is None:
        return run_name
    first, _, rest = run_name.partition("-")
    return "-".join(w for w in (first, f"j{job}", rest) if w)


# Keys that may differ between a run and its resume: they change no result (where packs
# train included: the same plan gives the same numbers in any process; where calibrations
# and downloads are kept, which packexp.tune moves to its home: a resume reads its
# calibration from the run directory; refit and refit_epochs, what follows the search).
RESUME_FREE = ("resume", "summary_top_k", "budget.", "tracking.", "executor.", "listeners",
               "strategy.calibration_dir", "dataset.cache_dir", "device.probe_dir", "refit")



def comparable(cfg: DictConfig) -> dict[str, Any]:
    """The flat config a resume must match (``RESUME_FREE`` keys left out)."""
    return {k: v for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()
            if not k.startswith(RESUME_FREE)}


def check_run_dir(cfg: DictConfig, run_dir: Path, unsettled: Collection[str] = ()) -> None:
    """A ``ConfigError`` naming why a search of ``cfg`` cannot start in ``run_dir``
    (``Recorded.to_continue``: a fresh run where a journal is, a resume where none is, of a
    finished run, or of one started with another value of a key but ``unsettled`` ones)."""
    Recorded.read(run_dir).to_continue(comparable(cfg), bool(cfg.get("resume", False)),
                                       unsettled)


@contextmanager
def refused() -> Iterator[None]:
    """A ``ConfigError`` raised in a Hydra callback, as the job reports one: its line and
    exit code 2 (Hydra would print a traceback)."""
    try:
        yield
    except ConfigError as e:
        refuse(str(e))


def make_dir(key: str, path: Any) -> None:
    """Makes the directory Hydra is about to write in, or a ``ConfigError`` naming ``key``,
    the directory and why it cannot be made (a file in its path, no permission, ...)."""
    try:
        Path(str(path)).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{key}={path}: cannot make this directory ({e.strerror}"
                          + (f": {e.filename}" if e.filename and str(e.filename) != str(path)
                             else "") + ")") from None


def run_dir_given(config: DictConfig) -> bool:
    """Whether ``hydra.run.dir`` names a run: set on the command line (or by ``packexp.tune``'s
    ``run_dir``), or in a config file, rather than Hydra's new ``${now:...}`` directory."""
    hydra_overrides = OmegaConf.select(config, "hydra.overrides.hydra") or []
    if any(str(o).lstrip("+~").startswith("hydra.run.dir=") for o in hydra_overrides):
        return True
    return "${now:" not in str(OmegaConf.to_container(config.hydra.run, resolve=False)["dir"])


def resume_needs_a_run_dir(runs: Path, shown: int = 3) -> str:
    """The line for ``resume=true`` without ``hydra.run.dir``: the latest unfinished runs
    under ``runs`` (newest first), which the user most likely means."""
    unfinished = [d for d in sorted(runs.glob("*"), reverse=True) if unfinished_run(d)]
    listed = (f"; the latest unfinished runs under {runs}: "
              + ", ".join(str(d) for d in unfinished[:shown]) if unfinished
              else f"; there is no unfinished run under {runs}")
    return f"resume=true: give hydra.run.dir=<the run to continue>{listed}"


def unfinished_run(run_dir: Path) -> bool:
    """A run directory whose journal has no ``finished`` record (a killed search)."""
    return Recorded.read(run_dir).unfinished


def refuse_run_dir(config: DictConfig) -> None:
    """``check_run_dir`` on a composed config (its ``hydra`` node included), before Hydra
    writes in ``hydra.run.dir``: a ``ConfigError`` if the search cannot start there."""
    if config.get("task") != "tune":
        return
    task = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
    # dataset.images=auto is settled by the model, which needs TensorFlow, and so is a
    # ${default:} read from a model builder's signature: the job, which starts TensorFlow
    # quietly, compares those keys. Here they are left unresolved (nothing imports Keras).
    auto = ["dataset.images"] if task.get("dataset", {}).get("images") == "auto" else []
    for key, value in flatten(OmegaConf.to_container(task, resolve=False)).items():
        if isinstance(value, str) and value.startswith("${default:"):
            OmegaConf.update(task, key, None, force_add=True)
            auto.append(key)
    with config_errors():
        check_run_dir(task, Path(str(config.hydra.run.dir)), auto)


_jobs_started = 0
_next_job_started: float | None = None



def command_started() -> float:
    """Where this job's ``startup_s`` counts from (time.time() seconds).

    The process's start for its first job, so Python, TensorFlow and Hydra starting count;
    a later job of a multirun sweep starts afresh in the same process, at this call; a job
    of ``packexp.tune``, at the call (``count_next_job_from``).
    """
    global _jobs_started, _next_job_started
    _jobs_started += 1
    if _next_job_started is not None:
        started, _next_job_started = _next_job_started, None
        return started
    return process_started() if _jobs_started == 1 else time.time()


def process_started() -> float:
    """When this process started (time.time() seconds), to a clock tick (10 ms) on Linux.

    psutil's ``create_time`` adds the process's start to the boot time the kernel gives in
    whole seconds, so it may be a second early; the process's age since boot is exact.
    """
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return psutil.Process().create_time()


def count_next_job_from(started: float | None) -> None:
    """The next job's ``startup_s`` counts from ``started`` rather than the process's start
    (``packexp.tune`` runs in a process, a notebook's kernel, that may be hours old); None
    forgets a time no job took."""
    global _next_job_started
    _next_job_started = started
