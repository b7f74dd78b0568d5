"""A kept model whose file holds only its weights, built again from its run's config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packexp.errors import ConfigError
from packexp.space import Trial


def kept_model(run_dir: Path, trial_id: str, hparams: Mapping[str, Any], weights: Path) -> Any:
    """``trial_id``'s model as its whole ``.keras`` file would have held it: the run's
    builder (its ``.hydra/config.yaml``'s model, importable here: a module's function, or
    a builder handed to ``packexp.tune`` in this process) built with ``hparams``, the
    ``weights`` loaded into it, between the layers that take the rows as they were given
    (``packing.export.servable``, the run's data read again for its standardisation).

    Raises:
        ValueError: The builder or the data cannot be had here; one line saying how to
            build the model yourself.
    """
    from packexp.app.tasks.refit import run_config
    from packexp.config.components import Components
    from packexp.packing.export import from_weights

    try:
        parts = Components.build(run_config(run_dir), probe=False)
    except ConfigError as e:
        raise ValueError(f"{weights}: only the weights of {trial_id}'s model were kept, and "
                         f"its model cannot be built here ({e}); build it with your builder "
                         f"and its hparams {dict(hparams)}, then call model.load_weights(path) "
                         "(docs/models.md, \"What is kept\")") from None
    cache = parts.pack_cache(parts.dataset)
    return from_weights(Trial(trial_id, dict(hparams), ()), weights, cache.make_member,
                        cache.data)
