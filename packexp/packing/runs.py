"""What a trained pack hands back to the search, typed, without TensorFlow or Keras: its pack
runs (``PackRun``: each member's result, what the training measured, each member's
evaluation, its time and memory). TensorFlow's trainer (``trainer.py``) and the fake
(``packexp.testing.fake_trainer``) both return these (``executors.Trainer.train_group``)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packexp.packing.member import MemberState
    from packexp.space import Trial


@dataclass
class PackStats:
    """What one ``Pack.train`` call measured."""

    members: int
    fused: bool = False
    looped: bool = False  # one program looping over the members (``packing.looped``)
    xla: bool = False
    grouped_conv: str | None = None  # fused packs with grouped convolutions: native or split
    steps: int = 0
    train_s: float = 0.0
    read_s: float = 0.0  # waiting for a stream's blocks (``data.streamed``), not in train_s
    trace_s: float = 0.0  # step functions traced or compiled (and warmed up) for this call
    programs: int = 0  # step programs traced (and compiled, under XLA) for this call
    eval_programs: int = 0  # evaluation programs traced (counted by the trainer)
    switches: int = 0
    switch_overhead_s: float = 0.0
    chunk_step_ms: list[float] = field(default_factory=list)
    group: tuple | None = field(default=None, repr=False)  # the step function last run

    @property
    def step_time_ms(self) -> float | None:
        """Median time of one pack step over the chunks run."""
        return statistics.median(self.chunk_step_ms) if self.chunk_step_ms else None


@dataclass(frozen=True)
class Evaluation:
    """A member's validation metrics: a classification's accuracy and cross-entropy, or a
    regression's mean squared error (``val_loss`` too), mean absolute error and R²; None
    where the member failed or the metric is not its problem's."""

    val_accuracy: float | None
    val_loss: float | None
    val_mse: float | None = None
    val_mae: float | None = None
    val_r2: float | None = None
    params: int | None = None  # the member's parameter count
    flops: int | None = None  # its FLOPs per example (``models.flops``)
    extra: dict[str, float] | None = None  # the model's own metrics (``model.metrics``)


@dataclass(frozen=True)
class MemberResult:
    """A member as its pack left it: the pack's models may serve other trials next."""

    trial: Trial
    state: MemberState | None  # None when a worker wrote it to ``checkpoint`` instead
    failed: bool
    train_loss: float | None
    checkpoint: str | None = None
    saved_step: int = 0  # the step of a state left in ``checkpoint`` (or of a failed member)
    mean_loss: float | None = None  # over every step of this stretch (``Member.mean_loss``)

    @property
    def trial_id(self) -> str:
        return self.trial.trial_id

    @property
    def step(self) -> int:
        return self.saved_step if self.state is None else self.state.step


@dataclass
class PackRun:
    """One pack as it actually ran, with its time by phase (seconds) and memory (bytes):
    ``peak_memory_bytes`` how far the peak rose over the pack (``PeakMemory.growth_bytes``),
    ``peak_rss_bytes`` its process's peak resident set, ``gpu_peak_bytes`` the peak's rise
    on a GPU (None on a CPU)."""

    members: list[MemberResult]
    stats: PackStats
    evaluation: dict[str, Evaluation]
    peak_memory_bytes: int
    splits: int = 0
    reused: bool = False
    reused_members: int = 0  # of a new pack, members taken from kept packs, not built
    build_s: float = 0.0  # members built or their states loaded
    eval_s: float = 0.0  # evaluation, its tracing left out (counted in stats.trace_s)
    started: float = 0.0  # time.perf_counter() when the pack began
    peak_rss_bytes: int = 0
    gpu_peak_bytes: int | None = None
    ended: float | None = None  # time.perf_counter() when it ended, if before it is published
    worker: int | None = None  # under executor=ray: the worker that trained it,
    node: str | None = None  # its Ray node's id
    host: str | None = None  # and that node's address
