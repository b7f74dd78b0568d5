"""The Ray actor that trains packs (``PackWorker``) and the plain dicts it returns, read
back by the driver (``unpack``); ``ray.py``'s ``RayExecutor`` starts and feeds the actors."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from packexp.executors.base import ATTEMPTS, CacheView, PackJob, tensorflow_trainer

#: The function that builds a worker's ``PackCache`` from the run's config.
WORKER_CACHE = "packexp.config.components.worker_cache"

log = logging.getLogger(__name__)


class PackWorker:
    """A Ray actor: the dataset on its device and a ``PackCache``, taking packs one at a time.

    Args:
        cfg: The run's config as a plain container.
        shared_dir: Where checkpoints go; the same path on every node.
        gpu_share: Its fraction of one GPU; 0 on a CPU.
        trainer: What trains the packs (``executors.Trainer``); TensorFlow's when None.
        worker_cache: The function, by its dotted name, that builds the actor's cache from
            the config (``config.components.worker_cache``: named, not imported, so that the
            executors import nothing of the assembly above them).
    """

    def __init__(self, cfg: dict, shared_dir: str, gpu_share: float = 0.0,
                 trainer: Any = None, worker_cache: str = WORKER_CACHE) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if gpu_share > 0:
            _cap_gpu_memory(gpu_share)
        else:  # Ray no longer hides a host's GPUs from actors that asked for none
            from packexp import telemetry

            telemetry.leave_gpu()
        from hydra.utils import get_method

        self.shared_dir = Path(shared_dir)
        self.trainer = trainer if trainer is not None else tensorflow_trainer()
        self.cache = get_method(worker_cache)(OmegaConf.create(cfg))

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict[str, Any]:
        """Where this actor runs: its Ray node's id, the node's address and its pid. The
        driver asks it first: the answer says the actor is ready (``__init__`` has run)."""
        import ray

        return {"node": ray.get_runtime_context().get_node_id(),
                "host": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def on_device(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, CacheView]:
        """``fn(cache, *args)`` on this actor's device, and its cache after."""
        return fn(self.cache, *args), CacheView.of(self.cache)

    def run_pack(self, job: PackJob) -> tuple[tuple[list[dict], tuple[float, float]],
                                               CacheView]:
        """Trains ``job``; returns its pack runs as plain dicts (``RayExecutor.unpack``) with
        when this actor took the pack and handed it back (``time.time()``), and what its
        cache keeps after it.

        Each call writes into a directory of its own, so a retried call never overwrites
        the files of the attempt before it.
        """
        trainer = self.trainer
        started, took = time.perf_counter(), time.time()
        attempt = self.shared_dir / ATTEMPTS / f"{job.key}.{uuid.uuid4().hex[:8]}"
        states = {i: trainer.read_state(s) if isinstance(s, str) else s
                  for i, s in job.states.items()}
        runs = trainer.train_group(job.group, self.cache, job.epochs, states, fusion=job.fusion,
                                   lr_horizon=job.lr_horizon)
        out = []
        for run in runs:
            members = [{
                "trial_id": m.trial_id, "failed": m.failed, "train_loss": m.train_loss,
                "step": m.step,
                "checkpoint": trainer.write_state(m.state, attempt / m.trial_id)
                if job.checkpoint and not m.failed else None,
            } for m in run.members]
            out.append({
                "members": members,
                "stats": {f.name: getattr(run.stats, f.name) for f in fields(run.stats)
                          if f.name != "group"},
                "evaluation": {i: asdict(e) for i, e in run.evaluation.items()},
                "peak_memory_bytes": run.peak_memory_bytes, "splits": run.splits,
                "peak_rss_bytes": run.peak_rss_bytes, "gpu_peak_bytes": run.gpu_peak_bytes,
                "reused": run.reused, "reused_members": run.reused_members,
                "build_s": run.build_s, "eval_s": run.eval_s,
                "started_ago_s": time.perf_counter() - run.started,
                "attempt": attempt.name, "pid": os.getpid(),
            })
        log.debug("pack %s trained in %.3f s", job.key, time.perf_counter() - started)
        return (out, (took, time.time())), CacheView.of(self.cache)


def _cap_gpu_memory(share: float) -> None:
    """Limits TensorFlow to ``share`` of the actor's GPU, before any GPU op runs, and makes
    NVML telemetry and the pack capacity follow the GPU Ray gave the actor and its share."""
    import ray
    import tensorflow as tf

    from packexp import telemetry

    ids = ray.get_runtime_context().get_accelerator_ids().get("GPU") or []
    if ids:
        telemetry.use_gpu_index(int(ids[0]))
    telemetry.note_free_gpu_memory()
    gpus = tf.config.list_physical_devices("GPU")
    memory = telemetry.gpu_memory()
    if gpus and memory and share < 1:
        limit_mb = int(memory[0] * share / 2**20)
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=limit_mb)])
        telemetry.cap_gpu_memory(limit_mb * 2**20)



def unpack(run: dict, job: PackJob, received: float, where: dict | None = None) -> Any:
    """A worker's plain dict as the ``PackRun`` the tuner publishes; ``where``: the worker's
    number, node and host (``RayExecutor``)."""
    from packexp.packing.runs import Evaluation, MemberResult, PackRun, PackStats

    trials = {t.trial_id: t for t in job.group}
    members = [MemberResult(trials[m["trial_id"]], None, m["failed"], m["train_loss"],
                            checkpoint=m["checkpoint"], saved_step=m["step"])
               for m in run["members"]]
    return PackRun(members, PackStats(**run["stats"]),
                   {i: Evaluation(**e) for i, e in run["evaluation"].items()},
                   run["peak_memory_bytes"], run["splits"], run["reused"],
                   reused_members=run["reused_members"], build_s=run["build_s"],
                   eval_s=run["eval_s"], started=received - run["started_ago_s"], ended=received,
                   peak_rss_bytes=run["peak_rss_bytes"], gpu_peak_bytes=run["gpu_peak_bytes"],
                   worker=(where or {}).get("worker"), node=(where or {}).get("node"),
                   host=(where or {}).get("host"))
