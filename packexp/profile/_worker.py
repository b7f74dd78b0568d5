"""A fresh training process for the memory and concurrency profiles: one pack, timed and metered.

The profiles start it as ``python -m packexp.profile._worker`` with a JSON spec on stdin. It
prints ``ready`` after warming up (and, with ``sync``, waits for a line on stdin so that
concurrent workers time the same span), then ``result {json}``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from packexp.profile.base import Profile, ProfileContext

READY = "ready"
RESULT = "result "


@dataclass
class WorkerResult:
    """What one worker process measured.

    Attributes:
        status: ``ok`` or ``out_of_memory``.
        step_ms: Median step time of each timed chunk.
        peak_bytes: Peak memory: the process's peak RSS on a CPU, TensorFlow's allocator
            peak on a GPU.
        growth_bytes: How far the peak rose above the memory in use once TensorFlow was up
            and the data was on the device: the members' own cost.
        note: Why the status is not ``ok``.
    """

    status: str = "ok"
    step_ms: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    growth_bytes: int = 0
    note: str = ""

    @property
    def median_step_ms(self) -> float:
        import statistics

        return statistics.median(self.step_ms) if self.step_ms else float("nan")


def spec(model: Mapping[str, Any], dataset: Mapping[str, Any], members: Sequence[Mapping],
         *, seed: int, indices: Sequence[int] | None = None, steps: int, warmup_steps: int,
         repeats: int, pack_options: Mapping[str, Any], sync: bool = False) -> dict[str, Any]:
    """The JSON spec of one worker: which members to pack and how to time them.

    Args:
        model: The resolved ``model`` config node.
        dataset: The resolved ``dataset`` config node.
        members: Each member's hyper-parameters.
        seed: The root seed.
        indices: Each member's trial index (its seed); 0, 1, ... when None.
        steps: Steps per timed chunk.
        warmup_steps: Untimed steps after compiling.
        repeats: Timed chunks.
        pack_options: The pack settings (``PackSettings.from_config`` reads them).
        sync: Wait for a go line after warming up.

    Returns:
        The spec.
    """
    return {"model": dict(model), "dataset": dict(dataset), "members": [dict(m) for m in members],
            "seed": seed, "indices": list(indices or range(len(members))), "steps": steps,
            "warmup_steps": warmup_steps, "repeats": repeats,
            "pack_options": dict(pack_options), "sync": sync}


def spec_maker(profile: Profile, ctx: ProfileContext,
               sync: bool = False) -> Callable[..., dict[str, Any]]:
    """``spec`` for ``profile``'s workers, taking only ``members`` and ``indices``.

    Every worker trains the configured model on the configured data, with the profile's
    timing settings and the configured pack under the profile's first ``xla`` setting.

    Raises:
        ConfigError: A batch size is larger than the training set.
    """
    from packexp.profile.checks import check_batch_sizes

    check_batch_sizes(profile.batch_sizes, ctx.dataset)
    return functools.partial(spec, ctx.node("model"), ctx.node("dataset"), seed=ctx.seed,
                             steps=profile.steps, warmup_steps=profile.warmup_steps,
                             repeats=profile.repeats,
                             pack_options={**ctx.pack_options, "jit_compile": profile.xla[0]},
                             sync=sync)


def run_workers(specs: Sequence[Mapping[str, Any]], timeout_s: float = 1800) -> list[WorkerResult]:
    """Runs one worker per spec, all at once; synced workers start timing together.

    A worker that runs out of memory, or is killed (as the kernel's OOM killer does), is a
    result with status ``out_of_memory``; any other failure raises RuntimeError.

    Returns:
        One result per spec, in order.
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    with contextlib.ExitStack() as stack:
        procs, logs = [], []
        for s in specs:
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            proc = stack.enter_context(subprocess.Popen(
                [sys.executable, "-m", "packexp.profile._worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, env=env))
            proc.stdin.write(json.dumps(s) + "\n")
            proc.stdin.flush()
            procs.append(proc)
            logs.append(log)
        early: list[str | None] = []
        for proc in procs:  # every worker is warm (or done) before any starts timing
            line = proc.stdout.readline()
            while line and line.strip() != READY and not line.startswith(RESULT):
                line = proc.stdout.readline()
            early.append(line if line.startswith(RESULT) else None)
        for proc in procs:
            try:
                proc.stdin.write("go\n")
                proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        results = []
        for proc, log, first in zip(procs, logs, early, strict=True):
            # The same buffered reader as the readline above: it may hold the result already.
            out = proc.stdout.read()
            proc.wait(timeout=timeout_s)
            log.seek(0)
            results.append(_result(proc.returncode, (first or "") + out, log.read()))
        return results


def _result(returncode: int, stdout: str, stderr: str) -> WorkerResult:
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT)]
    if returncode == 0 and lines:
        return WorkerResult(**json.loads(lines[-1][len(RESULT):]))
    if returncode < 0 or "ResourceExhausted" in stderr or "MemoryError" in stderr:
        reason = (f"killed by signal {-returncode} (the kernel's out-of-memory killer does "
                  "this)") if returncode < 0 else "ran out of memory"
        return WorkerResult(status="out_of_memory", note=f"worker {reason}")
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    raise RuntimeError(f"profile worker failed (exit {returncode}):\n{tail}")


def _peak_rss_so_far() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def main() -> None:
    job = json.loads(sys.stdin.readline())
    import tensorflow as tf
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from packexp.packing import DeviceData, Member, Pack
    from packexp.space import Trial, derive_seed
    from packexp.space.options import PackSettings
    from packexp.telemetry import PeakMemory, tf_gpu_name

    ready = False
    try:
        dataset = instantiate(OmegaConf.create(job["dataset"]))
        build = instantiate(OmegaConf.create(job["model"]))
        data = DeviceData(dataset)
        before = _peak_rss_so_far()
        with PeakMemory() as peak:
            members = [
                Member.create(Trial(f"m{i}", hp, (), seed=derive_seed(job["seed"], i)), build,
                              dataset.input_shape, dataset.num_classes, data.train_size)
                for i, hp in zip(job["indices"], job["members"], strict=True)]
            settings = PackSettings.from_config({**job["pack_options"],
                                                 "chunk_steps": job["steps"]})
            pack = Pack(members, data, settings)
            pack.train({m.trial_id: max(1, job["warmup_steps"]) for m in members})
            print(READY, flush=True)
            ready = True
            if job["sync"]:
                sys.stdin.readline()
            step_ms = [pack.train({m.trial_id: job["steps"] for m in members}).step_time_ms
                       for _ in range(job["repeats"])]
        on_gpu = tf_gpu_name() is not None
        result = WorkerResult(step_ms=step_ms, growth_bytes=peak.growth_bytes,
                              peak_bytes=peak.peak_bytes if on_gpu else max(before,
                                                                             peak.peak_bytes))
    except (tf.errors.ResourceExhaustedError, MemoryError) as e:
        note = " ".join(str(e).split())[:200] or type(e).__name__
        result = WorkerResult(status="out_of_memory", note=f"worker ran out of memory: {note}")
        if not ready:
            print(READY, flush=True)
    print(RESULT + json.dumps(result.__dict__), flush=True)


if __name__ == "__main__":
    main()
