"""``task=profile``: one of the paper's micro-benchmarks (``packexp/profile/``), measured,
written as a CSV and a figure, and tracked. TensorFlow loads here."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from packexp.app.session import tracked
from packexp.config import instantiate
from packexp.events import Summary
from packexp.records.report import print_profile
from packexp.telemetry import device_facts

log = logging.getLogger(__name__)


def profile(cfg: DictConfig, run_dir: Path) -> float:
    """The ``profile`` task: measures ``cfg.profile``, writes its CSV and figure, logs both.

    Returns:
        The profile's objective (by default the best IMPV measured).
    """
    from packexp.profile.base import Profile, ProfileContext
    from packexp.profile.figures import FIGURE_NAME
    from packexp.profile.tables import CSV_NAME, write_csv

    profile: Profile = instantiate(cfg.profile, "profile")
    ctx = ProfileContext.from_config(cfg, run_dir)
    facts = device_facts()
    log.info("device: %s", facts)
    with tracked(cfg, run_dir, dataset=ctx.dataset,
                 run_name=f"profile-{profile.name}-{ctx.names['model']}-{ctx.names['dataset']}",
                 tags={**ctx.names, "task": "profile", "profile": profile.name,
                       **facts.tags()}) as tracker:
        rows = profile.measure(ctx)
        table = write_csv(rows, profile.columns, ctx.run_dir / CSV_NAME)
        picture = profile.plot(rows, ctx.run_dir / FIGURE_NAME, ctx)
        tracker.on_summary(Summary(profile.metrics(rows), [(table, None), (picture, None)]))
    print_profile(profile, rows, ctx.names, table, picture, tracker.location)
    return float(profile.objective(rows))
