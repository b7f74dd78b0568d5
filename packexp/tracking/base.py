"""The tracker extension point: a listener that keeps a run's events in a store."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packexp.events import Listener

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from packexp.data import Dataset


class TrackingError(RuntimeError):
    """The tracking store cannot be used; raised at start-up, before any training."""


# What a trial's status in the search is called in a tracking store.
STATUS = {"killed": "KILLED", "failed": "FAILED", "finished": "FINISHED"}
# Keys Hydra reads to instantiate a node: how it is built, not a setting to compare runs by.
INSTANTIATION_KEYS = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})
# Groups whose implementations are modules named as their YAML files: outside a Hydra app
# (no record of the choices), the module names the choice.
MODULE_NAMED_GROUPS = ("strategy", "model", "dataset", "sampler", "scheduler", "profile")


class Tracker(Listener, abc.ABC):
    """Records one invocation as a parent run and each trial as a nested run: a listener of
    the search's events (``packexp/events.py``) that keeps what it hears in a store.

    ``start`` may refuse the store (a ``TrackingError``); no handler may stop a search, and
    ``end`` may be called again after the run has ended. A tracker overrides the handlers
    of the events it records.
    """

    @abc.abstractmethod
    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None, config_yaml: str | None = None,
              dataset: Dataset | None = None, dataset_source: str | None = None) -> None:
        """Opens the parent run, or re-attaches to ``resume_run_id`` and its trial runs.

        Args:
            run_name: The parent run's name.
            params: The parent run's params.
            tags: The parent run's tags.
            resume_run_id: The parent run of the search being resumed, if any.
            config_yaml: The composed config, kept as ``config.yaml``.
            dataset: The arrays the search trains and validates on.
            dataset_source: Where the dataset was read from (a file or folder); None for
                data made in code (digits, synthetic).
        """

    @abc.abstractmethod
    def end(self, status: str = "FINISHED") -> None:
        """Ends the parent run and any trial run still open; nothing once it has ended."""

    def log_model(self, model: Any) -> dict[str, str] | None:
        """Logs a kept model file (a ``tracking.models.KerasFile``) on the run as an MLflow
        Model; returns where it goes (``uri``, and ``registered_as``), or None when nowhere."""
        del model
        return None

    @property
    def location(self) -> str | None:
        """Where the runs are kept, for the summary; None when nowhere."""
        return None

    @property
    def lost(self) -> str | None:
        """Why the store stopped hearing of the run part-way (its record is incomplete);
        None while it hears everything."""
        return None

    @property
    def run_id(self) -> str | None:
        """The parent run's id while it is open, which a resume re-attaches to."""
        return None


def hydra_tags() -> dict[str, str]:
    """Where the run sits in a Hydra sweep (``sweep_dir``, ``job_num``) and its overrides."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hydra = HydraConfig.get()
    except ValueError:
        return {}
    tags = {"overrides": " ".join(hydra.overrides.task) or "(none)"}
    if str(hydra.mode) == "RunMode.MULTIRUN":
        tags.update(sweep_dir=str(Path(hydra.sweep.dir).resolve()), job_num=str(hydra.job.num))
    return tags


def run_params(cfg: DictConfig) -> dict[str, Any]:
    """A run's params: each config group's choice as on the command line (``strategy=knn``,
    ``scheduler=hyperband``) and each value of the composed config by its dotted key
    (``scheduler.R``), without Hydra's instantiation keys (``strategy._target_``). Only a
    profile run has the ``profile`` group's."""
    from omegaconf import OmegaConf

    from packexp.config import flatten

    params = {**flatten(OmegaConf.to_container(cfg, resolve=True)), **group_choices(cfg)}
    return {k: v for k, v in params.items()
            if k.rsplit(".", 1)[-1] not in INSTANTIATION_KEYS
            and (cfg.get("task") == "profile" or k.split(".", 1)[0] != "profile")}


def group_choices(cfg: DictConfig) -> dict[str, str]:
    """The file chosen in each config group of the job (Hydra's own groups and empty slots
    left out); outside a Hydra app, the module each of ``MODULE_NAMED_GROUPS`` names."""
    from hydra.core.hydra_config import HydraConfig

    from packexp.config import component_name

    try:
        choices = HydraConfig.get().runtime.choices
    except ValueError:
        return {g: component_name(cfg, g) for g in MODULE_NAMED_GROUPS if g in cfg}
    return {str(g): str(c) for g, c in choices.items()
            if c is not None and not str(g).startswith("hydra/")}
