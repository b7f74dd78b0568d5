"""The TensorFlow trainer: the pack engine behind the search's trainer seam
(``packexp.executors.Trainer``). Importing this module loads no TensorFlow; a method loads
the engine's modules when it is first called."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.space import Trial


class TensorFlowTrainer:
    """Trains packs with ``packing.trainer.train_group`` on a ``PackCache``; keeps a member's
    state as an ``.npz`` file (``packing.member``) and hands a trained member over as a
    ``.keras`` file (``packing.export``). It measures the device it trains on: its device
    calls go to the search's parts (``config.Components``), which build the ``PackCache`` and
    take memory probes, calibrations and device facts where packs train."""

    name = "tensorflow"
    measures_device = True

    def start(self, tensorflow: Callable[[], None]) -> None:
        """TensorFlow started before the job's task (``app.main.start_tensorflow``)."""
        tensorflow()

    def set_up(self, parts: Any, probe: bool) -> None:
        parts.set_up_device(probe)

    def cache(self, parts: Any, dataset: Any) -> Any:
        return parts.pack_cache(dataset)

    def device_facts(self, parts: Any, executor: Any) -> Any:
        return parts.measured_facts(executor)

    def prepare_device(self, parts: Any, cache: Any, executor: Any, facts: Any,
                       run_dir: Path) -> Any:
        return parts.measure_device(cache, executor, facts, run_dir)

    @property
    def checkpoint_suffix(self) -> str:
        """The suffix ``write_state`` gives a state file (``packing.member``)."""
        from packexp.packing.member import CHECKPOINT_SUFFIX

        return CHECKPOINT_SUFFIX

    def train_group(self, group: Sequence[Trial], cache: Any, epochs: float,
                    states: Mapping[str, Any], fusion: str | None = None,
                    lr_horizon: float | None = None) -> list[Any]:
        from packexp.packing.trainer import train_group

        return train_group(group, cache, epochs, states, fusion=fusion, lr_horizon=lr_horizon)

    def read_state(self, path: str | Path) -> Any:
        from packexp.packing.member import read_state

        return read_state(path)

    def write_state(self, state: Any, path: str | Path) -> str:
        from packexp.packing.member import write_state

        return write_state(state, path)

    def member_state(self, weights: Any, slots: Any, step: int, fresh_slots: bool = False) -> Any:
        """A state of ``weights`` and optimizer ``slots`` at ``step`` (a population's copy of
        its donor's, ``fresh_slots`` when its optimizer changed)."""
        from packexp.packing.member import MemberState

        return MemberState(weights, slots, step, fresh_slots=fresh_slots)

    def export(self, trial: Trial, state: Any, cache: Any, run_dir: Path,
               name: str | None = None) -> Any:
        """``trial``'s model in ``state`` as ``<run_dir>/models/<name>.keras``
        (``packing.export.export_member``)."""
        from packexp.packing.export import export_member

        return export_member(trial, state, cache.make_member, cache.data, run_dir, name=name)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return "TensorFlowTrainer()"
