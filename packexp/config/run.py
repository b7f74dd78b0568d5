"""A run's top-level settings, read once from the config and checked before TensorFlow loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from packexp.config.settings import budget_of, surrogate_of
from packexp.errors import ConfigError, flag, is_number, positive_int
from packexp.runner.budget import NO_BUDGET, Budget
from packexp.runner.keep import BEST, keep_setting
from packexp.surrogate import OFF, Surrogate

MAX_SEED = 2**32 - 1  # NumPy's and scikit-learn's seeds are unsigned 32-bit
TASKS = ("tune", "plan", "profile", "refit")


@dataclass(frozen=True)
class RunSettings:
    """The config's top-level keys as a run reads them: each checked once, where the config
    is read (``of``), so a bad value is one line naming its key before anything loads, and
    the tasks take typed values, not ``cfg.get`` where they are used.

    Attributes:
        task: What the command runs (``TASKS``).
        seed: The run's root seed.
        resume: Whether the run in the run directory is continued.
        keep_models: Whose trained weights a search hands over (``runner.keep``).
        refit: Whether a search's best is trained again on every row once it ends.
        refit_epochs: The refit's epochs; None: those the best trial trained.
        summary_top_k: The configurations the summary lists.
        budget: When a search stops early (``budget.time_s``, ``budget.trials``).
        probe_dir: Where memory probes are kept across runs; None: the run directory only.
        surrogate: How the search uses narrow stand-ins (``surrogate``).
    """

    task: str = "tune"
    seed: int = 0
    resume: bool = False
    keep_models: str | int = BEST
    refit: bool = False
    refit_epochs: float | None = None
    summary_top_k: int = 5
    budget: Budget = NO_BUDGET
    probe_dir: str | None = None
    surrogate: Surrogate = OFF

    @classmethod
    def of(cls, cfg: Any) -> RunSettings:
        """``cfg``'s settings, each refused in one line naming its key (a ``ConfigError``);
        a key the config leaves out takes its default."""
        seed = cfg.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"seed={seed!r}: must be an integer from 0 to {MAX_SEED} (NumPy's "
                              "and scikit-learn's seeds are unsigned 32-bit)")
        task = cfg.get("task", "tune")
        if task not in TASKS:
            raise ConfigError(f"task={task!r}: must be one of {sorted(TASKS)}")
        top_k = cfg.get("summary_top_k")
        positive_int("summary_top_k", top_k, minimum=0, optional=True, error=ConfigError)
        try:
            keep = keep_setting(cfg.get("keep_models", BEST))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        refit = cfg.get("refit")
        if refit is not None:
            flag("refit", refit, error=ConfigError)
        return cls(task, seed, bool(cfg.get("resume", False)), keep, bool(refit),
                   epochs_setting("refit_epochs", cfg.get("refit_epochs")),
                   5 if top_k is None else top_k, budget_of(cfg),
                   OmegaConf.select(cfg, "device.probe_dir"), surrogate_of(cfg))


def epochs_setting(key: str, epochs: Any) -> float | None:
    """``epochs`` if it is null or a positive number; a ``ConfigError`` naming ``key``."""
    if epochs is not None and not (is_number(epochs) and epochs > 0):
        raise ConfigError(f"{key}={epochs!r}: must be a positive number of epochs, or null "
                          "(the epochs the best trial trained)")
    return epochs

