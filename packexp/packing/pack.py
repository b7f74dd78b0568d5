"""N members trained jointly in one TensorFlow step function."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from packexp.models.flops import flops_per_example
from packexp.packing.data import DeviceData
from packexp.packing.member import Member
from packexp.packing.program import STREAMED, MemberFacts, StepProgram, step_program
from packexp.packing.stats import Evaluation, PackStats
from packexp.packing.targets import regression_metrics
from packexp.space.options import (
    FUSED,
    LOOPED,
    PACK_DEFAULTS,
    SINGLE,
    PackSettings,
    Program,
    choose_program,
    compiles,
)

log = logging.getLogger(__name__)


class Pack:
    """Members trained jointly in one compiled step function.

    Each member gathers its own batch from the shared device copy of the data, by its own
    seeded order, so its updates are exactly those it would get alone.

    Every member takes the gradient of its own loss (they share no parameters) and applies
    it with its own optimizer. Misaligned step budgets (smaller batches take more steps per
    epoch) are handled by ``misaligned``:

    - ``mask``: one step function for the whole pack, compiled once. A member whose budget
      is spent skips the step (``tf.cond``), so its weights and optimizer state stay as
      they are, bit for bit, and it costs no compute.
    - ``switch``: the paper's way. When a member's budget is spent it leaves and the step
      function is rebuilt for the rest; the rebuild time is the switching overhead.

    ``data_sharing`` chooses where batches come from:

    - ``gather``: each member gathers its own batch by its own seeded order (isolation).
    - ``slice``: the paper's variant. One stream of batches of the largest batch size, in
      the order of the member with that batch size; each member takes the first rows it
      needs, and each distinct ``Preprocessing`` runs once per step for all who use it.
      Members then see each other's data order, so results depend on pack-mates.

    ``settings`` are the pack settings (``space.options.PackSettings``), a run's defaults
    unless given: fused and compiled where ``auto`` chooses; ``fusion="off",
    jit_compile=False`` gives the plain pack, traced but not compiled. ``batch_bucket``: the
    search's largest batch size, where compiled members' batches are padded to it.
    """

    def __init__(self, members: Sequence[Member], data: DeviceData,
                 settings: PackSettings = PACK_DEFAULTS, batch_bucket: int | None = None
                 ) -> None:
        if not members:
            raise ValueError("a pack needs at least one member")
        self.settings = settings
        self.members = list(members)
        self.data = data
        self.fusion = settings.fusion
        self.loop = settings.loop
        self.grouped_conv = settings.grouped_conv
        self.eval_batch_size = settings.eval_batch_size
        self._facts = MemberFacts(self.members, data.head, data.streams)
        # auto compiles where one program serves the pack to its end: masked (switching
        # rebuilds the step each time a member finishes, an XLA compile each) and gathered
        # batches (sliced ones are cut at traced sizes).
        self.jit_compile = compiles(self.settings, self._facts.convolutional)
        # Under XLA a batch of another size is another compile: members whose rows are
        # independent take batches padded to the bucket (the search's largest batch size),
        # their padded rows masked out of the loss, so one compiled program serves them all.
        self.batch_bucket = batch_bucket
        self._program: Program | None = None
        self._step: StepProgram | None = None  # built when first needed, for these members
        self._sizes: dict[int, dict[str, int]] = {}  # by model: parameters, FLOPs
        self.eval_trace_s = 0.0  # the last ``evaluate``'s tracing, when it traced

    def reloaded(self) -> None:
        """Takes in new member states loaded into the same models and optimizers.

        The traced step and evaluation functions read the members' variables (learning
        rates included) and take batch sizes and seeds as inputs, so they stay valid (a
        plain pack keys its step functions by whether each member's batches are padded
        too: a new trial padded where the last was not takes one of its own); a fused pack
        re-stacks its members' weights and optimizer state.
        """
        if self._step is not None:
            self._step.reload()

    def train(self, steps: Mapping[str, int]) -> PackStats:
        """Trains each member for its own number of further steps.

        Args:
            steps: trial_id to the number of steps to train it for.

        Returns:
            Timings: build time, switching overhead and the median pack step time.
        """
        remaining = {m.trial_id: int(steps.get(m.trial_id, 0)) for m in self.members}
        return self.step_program.train(remaining)

    @property
    def program(self) -> Program:
        """The program the pack trains with (``space.options.choose_program``), chosen when
        first asked; why it is not fused, or not looped, is logged then."""
        if self._program is None:
            self._program = program = choose_program(self._facts, self.settings)
            # Said once by the search where the data streams, not for every pack.
            if program.kind != FUSED and self.fusion != "off":
                log.log(logging.DEBUG if program.unfused in (SINGLE, STREAMED) else logging.INFO,
                        "pack of %d trains unfused: %s", len(self.members), program.unfused)
            if (program.kind not in (FUSED, LOOPED) and self.loop != "off"
                    and not program.xla):
                log.log(logging.DEBUG if program.unlooped == STREAMED else logging.INFO,
                        "pack of %d is not looped: %s", len(self.members), program.unlooped)
        return self._program

    @property
    def step_program(self) -> StepProgram:
        """The chosen program built for the members (``packing.program.StepProgram``)."""
        if self._step is None:
            self._step = step_program(self.program, self.members, self.data, self.settings,
                                      self.batch_bucket)
        return self._step

    @property
    def fused(self) -> bool:
        """Whether the pack trains as one fused model (``program``)."""
        return self.program.kind == FUSED

    @property
    def looped(self) -> bool:
        """Whether the pack trains as a loop over its members in one program that holds one
        model (``packing.looped``): plain, uncompiled packs of one architecture."""
        return self.program.kind == LOOPED

    def evaluate(self) -> dict[str, Evaluation]:
        """Each member's validation metrics (``Evaluation``); None for failed members."""
        out = {m.trial_id: Evaluation(None, None) for m in self.members if m.failed}
        t0 = time.perf_counter()
        fn, traced = self.step_program.evaluator()  # every member, idle and failed included
        own = bool(self.data.head.metrics)  # only the plain program runs them (OWN_HEAD)
        if own:
            self.step_program.reset_metrics()
        self.eval_trace_s = time.perf_counter() - t0 if traced else 0.0

        scored = self.members
        n = self.data.val_size
        correct, loss_sum = np.zeros(len(scored)), np.zeros(len(scored))
        for x, y in self.data.val_batches(self.eval_batch_size):
            c, s = fn(x, y)
            correct += c
            loss_sum += s
        extra = self.step_program.metric_values() if own else [None] * len(scored)
        for m, c, s, metrics_of_own in zip(scored, correct, loss_sum, extra, strict=True):
            if m.failed or m.idle:
                continue
            if self.data.regression:  # c and s: the squared and the absolute errors summed
                metrics = regression_metrics(float(c), float(s), self.data.dataset.y_val,
                                             self.data.dataset.targets)
                ok = all(math.isfinite(v) for v in metrics.values())
                out[m.trial_id] = (Evaluation(None, metrics["val_mse"], **metrics,
                                              **self._size(m), extra=metrics_of_own) if ok
                                   else Evaluation(None, None))
                continue
            loss = s / n
            ok = math.isfinite(loss)
            out[m.trial_id] = Evaluation(float(c / n) if ok else None, float(loss) if ok else None,
                                         **self._size(m), extra=metrics_of_own if ok else None)
        return out

    def _size(self, member: Member) -> dict[str, int]:
        """The member's parameter count and FLOPs per example: its architecture's, counted
        once per model (a reused pack's new trials share its models)."""
        key = id(member.model)
        if key not in self._sizes:
            self._sizes[key] = {"params": member.model.count_params(),
                                "flops": flops_per_example(member.model)}
        return self._sizes[key]

    def free(self, trial_id: str, directory: str | Path) -> str:
        """Takes a member out of the pack (the paper's ``free``).

        Returns:
            Its checkpoint (weights, optimizer slots, step counter), for ``load``.
        """
        member = next((m for m in self.members if m.trial_id == trial_id), None)
        if member is None:
            raise KeyError(f"trial {trial_id!r} is not in this pack")
        path = member.save(directory)
        self.members.remove(member)
        self._reset()
        return path

    def load(self, member: Member, checkpoint: str | None = None) -> Member:
        """Adds a member to the pack (the paper's ``load``), restored from ``checkpoint``."""
        if checkpoint is not None:
            member.restore(checkpoint)
        self.members.append(member)
        self._reset()
        return member

    def _reset(self) -> None:
        """Drops the built program after the membership changed."""
        self._facts = MemberFacts(self.members, self.data.head, self.data.streams)
        self._program = None
        self._step = None
