"""Reproduces the paper's section 4 and Table 4 on this machine and writes docs/RESULTS.md.

Usage: python scripts/reproduce_paper.py [--only profiles kerastuner table4]
                                         [--models mlp3 mobilenet ...] [--profiles ...]
                                         [--R 27 81] [--strategies none knn ...]
                                         [--render-only]

Runs every profile that fits this machine for each model with an experiment file
conf/experiment/paper_profile_<model>.yaml, each as its own `python -m packexp task=profile
experiment=paper_profile_<model>` process; scripts/compare_kerastuner.py; and Table 4 at
digits scale: a Hyperband search (mlp3 on digits, Table 3's space) per R, strategy and
method (the paper's own pack, experiment=paper_method, and packexp's defaults), each its
own process, in a balanced order. Then it writes docs/RESULTS.md (tables, figures in
docs/results/, the commit and the machine, and the paper's numbers beside ours). Models
marked gpu_only (ResNet-50, DenseNet-121) run only where a GPU is present; without one
their rows are marked pending. Run directories go to outputs/reproduce/.
--only (and --models, --profiles, --R, --strategies) replace only those runs in the last
run's record. --render-only rewrites docs/RESULTS.md from the last run's outputs without
measuring.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packexp.profile import readings as rules  # noqa: E402  (packexp from this checkout)

OUT = ROOT / "outputs" / "reproduce"
DOCS = ROOT / "docs"
FIGURES = DOCS / "results"
PROFILES = ("num_models", "batch_size", "ablation", "memory", "switch_overhead", "concurrency")
COMMAND = "python scripts/reproduce_paper.py"
PARTS = ("profiles", "kerastuner", "table4")
# Table 4 at digits scale: every strategy, under the paper's pack and under packexp's.
TABLE4_R = (27, 81)
STRATEGIES = ("none", "batch_size", "random", "knn", "cost")
METHODS = {"paper_method": ("experiment=paper_method",), "packexp defaults": ()}
# The paper's Table 4 (seconds on a Quadro P5000; CIFAR-10, R=81, eta=3): Original (none),
# Batch-size, Random, kNN.
PAPER_TABLE4 = {"MLP-3": (9236, 5260, 3682, 3491), "MobileNet": (52092, 45787, 36973, 30182),
                "ResNet-50": (98067, 89162, 75436, 70047),
                "DenseNet-121": (131494, 126437, 117405, 108673)}
PAPER_ORDER = ("knn", "random", "batch_size", "none")  # fastest first
PAPER_MLP3_SPEEDUP = PAPER_TABLE4["MLP-3"][0] / PAPER_TABLE4["MLP-3"][3]
# One experiment file per model, conf/experiment/paper_profile_<model>.yaml.
EXPERIMENTS = ROOT / "conf" / "experiment"
EXPERIMENT_PREFIX = "paper_profile_"


@dataclass(frozen=True)
class Setup:
    """One model as this reproduction runs it: the ``paper`` key of its experiment file."""

    experiment: str
    name: str
    label: str
    table2: tuple[int, int, int]
    gpu_only: bool
    overrides: tuple[str, ...]
    per_profile: dict[str, tuple[str, ...]]
    # The paper's best IMPV for this model in Figure 4a, where its text gives one.
    figure4a_best: float | None = None

    def profile_overrides(self, profile: str) -> tuple[str, ...]:
        """What the command line adds to ``experiment=<experiment>`` for ``profile``."""
        return (*self.overrides, *self.per_profile.get(profile, ()))


def read_setups() -> dict[str, Setup]:
    """Every ``conf/experiment/paper_profile_<model>.yaml`` by model, in the paper's order."""
    from omegaconf import OmegaConf

    found = []
    for path in EXPERIMENTS.glob(f"{EXPERIMENT_PREFIX}*.yaml"):
        paper = OmegaConf.to_container(OmegaConf.load(path).paper)
        setup = Setup(
            experiment=path.stem, name=paper["name"], label=paper["label"],
            table2=tuple(paper["table2"]), gpu_only=paper["gpu_only"],
            overrides=tuple(paper.get("overrides", ())),
            per_profile={k: tuple(v) for k, v in paper.get("profile_overrides", {}).items()},
            figure4a_best=paper.get("figure4a_best"))
        found.append((paper["order"], path.stem.removeprefix(EXPERIMENT_PREFIX), setup))
    return {model: setup for _, model, setup in sorted(found, key=lambda f: f[:2])}


SETUPS = read_setups()


def machine() -> dict[str, Any]:
    """This machine: CPU model and cores, memory, GPU (from NVML) and software versions."""
    import psutil

    from packexp import telemetry

    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = None
    memory = telemetry.gpu_memory()
    if memory is not None:
        import tensorflow as tf

        devices = tf.config.list_physical_devices("GPU")
        name = tf.config.experimental.get_device_details(devices[0]).get(
            "device_name", "GPU") if devices else "GPU (NVML)"
        gpu = f"{name}, {memory[0] / 2**30:.1f} GB"
    versions = {}
    for package in ("tensorflow", "keras", "keras-tuner"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:
            versions[package] = "not installed"
    facts = telemetry.device_facts()
    return {"cpu": cpu, "onednn": facts.onednn, "logical_cores": os.cpu_count(),
            "physical_cores": psutil.cpu_count(logical=False),
            "ram_gb": psutil.virtual_memory().total / 2**30, "gpu": gpu,
            "python": platform.python_version(), "os": platform.platform(), **versions}


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes" if git("status", "--porcelain") else "")


def rel(path: Path) -> str:
    """``path`` from the repository root where it lies inside it, else whole."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run_timed(who: str, what: str, cmd: list[str],
              env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Runs ``cmd`` from the repository root and prints how long it took and how it ended."""
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    print(f"{who:>12} {what:<16} {wall:7.1f} s  {'ok' if out.returncode == 0 else 'FAILED'}",
          file=sys.stderr, flush=True)
    return out, wall


def last_lines(text: str) -> str:
    """A failed process's output, cut to where its error is."""
    return "\n".join(text.strip().splitlines()[-8:])


def run_profile(model: str, profile: str, setup: Setup) -> dict[str, Any]:
    """Runs one profile in its own process; the manifest record of how it went."""
    run_dir = OUT / model / profile
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = ["task=profile", f"profile={profile}", f"experiment={setup.experiment}",
                 *setup.profile_overrides(profile), "tracking.experiment=reproduce_paper"]
    cmd = [sys.executable, "-m", "packexp", *overrides, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    load = os.getloadavg()[0]
    out, wall = run_timed(model, profile, cmd, env)
    record = {"model": model, "profile": profile, "overrides": overrides,
              "wall_s": wall, "load_before": load,
              "load_after": os.getloadavg()[0], "returncode": out.returncode,
              "run_dir": rel(run_dir)}
    if out.returncode != 0:
        record["error"] = last_lines(out.stderr)
    return record


def run_kerastuner() -> dict[str, Any]:
    path = OUT / "kerastuner.json"
    out, wall = run_timed("kerastuner", "comparison", [
        sys.executable, str(ROOT / "scripts" / "compare_kerastuner.py"), "--json", str(path)])
    if out.returncode != 0:
        return {"error": last_lines(out.stderr or out.stdout), "wall_s": wall}
    return {**json.loads(path.read_text()), "wall_s": wall}


def table4_schedule(rs: Sequence[int], strategies: Sequence[str],
                    methods: Sequence[str]) -> list[tuple[int, str, str]]:
    """Every (R, strategy, method) search, in a balanced order: within each R the strategies
    rotate by one per method pass, and the methods alternate (ABBA), so no arm always runs
    first or last, or always on a fresher machine."""
    plan = []
    for r in rs:
        for i, strategy in enumerate(strategies):
            order = list(methods) if i % 2 == 0 else list(reversed(methods))
            plan += [(r, strategy, m) for m in order]
    return plan


def run_search(r: int, strategy: str, method: str) -> dict[str, Any]:
    """Runs one Table 4 search in its own process; its record (wall time, best accuracy)."""
    slug = method.replace(" ", "_")
    run_dir = OUT / "table4" / f"R{r}" / slug / strategy
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [f"strategy={strategy}", f"scheduler.R={r}", "tracking=none",
                 *METHODS[method]]
    cmd = [sys.executable, "-m", "packexp", *overrides, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    load = os.getloadavg()[0]
    out, wall = run_timed(f"R={r} {strategy}", method, cmd, env)
    record = {"R": r, "strategy": strategy, "method": method, "overrides": overrides,
              "process_s": wall, "load_before": load, "load_after": os.getloadavg()[0],
              "returncode": out.returncode, "run_dir": rel(run_dir)}
    results = run_dir / "results.json"
    if out.returncode != 0 or not results.exists():
        record["error"] = last_lines(out.stderr) or "no results.json"
        return record
    data = json.loads(results.read_text())
    best = data.get("best") or {}
    from packexp.records.plots import train_share
    from packexp.records.search_result import SearchResult

    record.update(wall_time_s=data["wall_time_s"], best_val_accuracy=best.get("val_accuracy"),
                  train_share=train_share(SearchResult.from_json(run_dir, data)),
                  best_trial=best.get("trial_id"), packs=len(data.get("packs", [])),
                  trials=len(data.get("trials", [])))
    return record


# ----------------------------------------------------------------------------- rendering


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def num(value: Any, digits: int = 3) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def pct(value: Any) -> str:
    return "-" if value in (None, "") else f"{100 * value:.1f}%"


class Results:
    """The rows of every run, and how each run went."""

    def __init__(self, manifest: dict[str, Any]) -> None:
        from packexp.profile.tables import read_csv

        self.manifest = manifest
        self.rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for record in manifest["runs"]:
            csv = ROOT / record["run_dir"] / "profile.csv"
            if record["returncode"] == 0 and csv.exists():
                self.rows[(record["model"], record["profile"])] = read_csv(csv)

    def get(self, model: str, profile: str) -> list[dict[str, Any]] | None:
        return self.rows.get((model, profile))

    def models(self, profile: str) -> list[str]:
        return [m for m in SETUPS if (m, profile) in self.rows]

    def figure(self, model: str, profile: str) -> str:
        return f"![{model} {profile}](results/{model}-{profile}.png)"

    def failed(self, profile: str) -> list[str]:
        return [f"- **{r['model']}: failed.** `{r.get('error', '').splitlines()[-1:]}`"
                for r in self.manifest["runs"]
                if r["profile"] == profile and r["returncode"] != 0]

    def section_end(self, out: list[str], profile: str, headers: Sequence[str],
              body: list[list[Any]], readings: list[str]) -> list[str]:
        """A section's table, figures and readings (if anything ran), then its failed runs."""
        if body:
            out += [table(headers, body), ""]
            out += [self.figure(m, profile) for m in self.models(profile)] + [""] + readings
        return [*out, *self.failed(profile), ""]

    def sweeps(self, model: str) -> list[dict[tuple[int, int], float]]:
        """IMPV by (N, batch size) in the Figure 4a and 4b runs that went well."""
        return [{(r["num_models"], r["batch_size"]): r["impv"] for r in ok(rows)}
                for rows in (self.get(model, "num_models"), self.get(model, "batch_size"))
                if rows]


def ok(rows: list[dict[str, Any]], key: str = "status") -> list[dict[str, Any]]:
    return [r for r in rows if r.get(key) == "ok"]


def noise_level(res: Results, model: str) -> float:
    """The larger of |IMPV| at N=1 and the gap between two runs' measurements of one point."""
    sweeps = res.sweeps(model)
    gaps = [abs(v) for sweep in sweeps for (n, _), v in sweep.items() if n == 1]
    if len(sweeps) == 2:
        gaps += [abs(sweeps[0][k] - sweeps[1][k]) for k in set(sweeps[0]) & set(sweeps[1])]
    return max(gaps, default=0.0)


def read_sweep(model: str, rows: list[dict[str, Any]], x: str, noise: float = 0.0) -> str:
    """The reading of one model's Figure 4a (``x="num_models"``) or 4b run."""
    setup = SETUPS.get(model)
    name = f"{model} ({setup.name})" if setup else model
    if x == "num_models":
        return str(rules.read_growth(name, rows, noise,
                                        setup.figure4a_best if setup else None))
    return str(rules.read_batch(name, rows, noise))


def section_sweep(res: Results, profile: str, x: str, heading: str, paper: str) -> list[str]:
    out = [heading, "", paper, ""]
    body = []
    for model in res.models(profile):
        for r in res.get(model, profile):
            body.append([model, r["num_models"], r["batch_size"], num(r.get("ts_seq_ms")),
                         num(r.get("ts_pack_ms")), impv_cell(r),
                         f"{share(r.get('seq_peak_share'))} / {share(r.get('pack_peak_share'))}",
                         f"{r.get('seq_xla') or '-'} / {r.get('pack_xla') or '-'}",
                         r.get("fused") if r.get("fused") is not None else "-",
                         num(r.get("predicted_memory_mb")), r["status"]])
    readings = [read_sweep(m, res.get(m, profile), x, noise_level(res, m))
                for m in res.models(profile)] if body else []
    if body and profile == "batch_size":
        readings += ["", noise(res)]
    peaks = [r["matmul_peak_gflops"] for m in res.models(profile) for r in res.get(m, profile)
             if r.get("matmul_peak_gflops")]
    if peaks:
        out += [f"This machine's float32 matmul peak measured {max(peaks):.0f} GFLOP/s (a "
                "2048 x 2048 matmul, best of 5); *peak share* is the matmul work of each arm's "
                "step (Dense and convolution layers, forward and backward) over its step time, "
                "as a share of that peak: how much of the device an arm already keeps busy, "
                "so how much a pack can still fill. IMPV is the median of the repeats' paired "
                "IMPVs, with their range in brackets.", ""]
    return res.section_end(out, profile, ["model", "N", "batch", "Ts(Seq) ms", "Ts(Pack) ms",
                                          "IMPV (range)", "peak share seq / pack",
                                          "XLA seq / pack", "fused", "predicted MB",
                                          "status"], body, readings)


def impv_cell(row: dict[str, Any]) -> str:
    """IMPV with the range of its repeats, where the run recorded one."""
    if row.get("impv_low") is None or row.get("impv_high") is None:
        return pct(row.get("impv"))
    return (f"{pct(row.get('impv'))} ({100 * row['impv_low']:.1f} to "
            f"{100 * row['impv_high']:.1f})")


def share(value: Any) -> str:
    return "-" if value in (None, "") else f"{100 * value:.0f}%"


def noise(res: Results) -> str:
    """How far apart two measurements of one point are: the readings' error bar."""
    parts = []
    for model in SETUPS:
        sweeps = res.sweeps(model)
        single = next((v for (n, _), v in sweeps[0].items() if n == 1), None) if sweeps else None
        text = []
        if single is not None:
            text.append(f"N=1 (a member alone against itself as a pack of one) gives "
                        f"{pct(single)}")
        if len(sweeps) == 2:
            text += [f"N={n}, batch {b} gives {pct(sweeps[0][(n, b)])} in the Figure 4a run "
                     f"and {pct(sweeps[1][(n, b)])} in the Figure 4b run"
                     for n, b in sorted(set(sweeps[0]) & set(sweeps[1]))]
        if text:
            parts.append(f"{model}: {'; '.join(text)}")
    if not parts:
        return ""
    return ("*Noise:* " + ". ".join(parts) + ". Differences of that size are noise, not "
            "effects: other processes sharing the CPU (the load column above) and steps "
            "too short to time closely.")


def section_ablation(res: Results) -> list[str]:
    from packexp.profile.readings import COLUMN, FACTORS, LABELS

    out = ["## Figure 5 and Table 1: ablation of the five factors (two models)", "",
           "Paper (GPU): the best cases share the training data and the batch size; sharing "
           "data always made packing pay (one transfer for both); with different data or batch "
           "sizes, even two copies of one model could pack slower than sequential.", "",
           "Data: *same* is one shared batch (`data_sharing=slice`: one gather and one "
           "preprocessing pass for both, the paper's shared input); *different* gives each "
           "member its own dataset (the configured one and a second draw with seed + 1, "
           "concatenated into one device tensor of which each member reads its half). "
           "Preprocessing *in step* keeps every example PNG-encoded on the device and decodes "
           "it inside the step (XLA cannot compile decoding, so those rows run without it); "
           "*pre-decoded* trains on the arrays. Different model: the other member is an MLP "
           "(256 x 2 units). Each model's CSV has every combination.", ""]
    summary, found = [], []
    for model in res.models("ablation"):
        rows = ok(res.get(model, "ablation"))
        columns = {f: COLUMN[f] for f in FACTORS}
        effects = rules.factor_effects(rows, columns)
        for f in sorted(effects, key=effects.get, reverse=True):
            alike = statistics.mean(r["impv"] for r in rows if r[COLUMN[f]])
            unlike = statistics.mean(r["impv"] for r in rows if not r[COLUMN[f]])
            direction = rules.PAPER_DIRECTION.get(f)
            paper = ("no direction stated" if direction is None else
                     f"{LABELS[f][0 if direction > 0 else 1]} packs better")
            summary.append([model, f.replace("_", " "), f"{LABELS[f][0]}: {pct(alike)}",
                            f"{LABELS[f][1]}: {pct(unlike)}",
                            f"{100 * effects[f]:+.1f} points", paper])
        slower = [r for r in rows if not r["pack_faster"]]
        summary.append([model, "**all**", f"{len(rows)} combinations",
                        f"{len(rows) - len(slower)} faster packed, {len(slower)} slower", "",
                        ""])
        setup = SETUPS.get(model)
        name = f"{model} ({setup.name})" if setup else model
        found.append(str(rules.read_ablation(name, rows, columns, LABELS,
                                                noise_level(res, model))))
    return res.section_end(out, "ablation",
                           ["model", "factor", "mean IMPV, alike", "mean IMPV, different",
                            "alike - different", "the paper"], summary, found)


def section_memory(res: Results) -> list[str]:
    out = ["## Figure 6: peak memory", "",
           "Paper (GPU, allocated memory): MLP-3's peak stays flat as the batch grows "
           "(TensorFlow pre-allocates, and its matrix products ran on the CPU); the CNNs' peaks "
           "grow with the batch size; two packed models take about the sum of two.", "",
           "Ours: each point trains in a fresh process; *peak* is how far the process's peak "
           "resident memory rose once TensorFlow was up and the data was on the device (model, "
           "optimizer state, step function, activations); *estimate* counts tensors only "
           "(weights, gradients, optimizer slots, activations).", ""]
    body, readings = [], []
    for model in res.models("memory"):
        rows = res.get(model, "memory")
        one = {r["batch_size"]: r for r in rows if r["num_models"] == 1}
        two = {r["batch_size"]: r for r in rows if r["num_models"] == 2}
        for b in sorted(set(one) | set(two)):
            a, c = one.get(b, {}), two.get(b, {})
            ratio = (c["peak_memory_mb"] / a["peak_memory_mb"]
                     if c.get("peak_memory_mb") and a.get("peak_memory_mb") else None)
            body.append([model, b, num(a.get("peak_memory_mb")), num(c.get("peak_memory_mb")),
                         num(ratio), num(a.get("estimated_memory_mb")),
                         num(c.get("estimated_memory_mb")), num(a.get("process_peak_mb")),
                         a.get("status", "-") + " / " + c.get("status", "-")])
        peaks = [r["peak_memory_mb"] for r in ok(rows) if r["num_models"] == 1]
        ratios = [two[b]["peak_memory_mb"] / one[b]["peak_memory_mb"] for b in one
                  if b in two and one[b].get("peak_memory_mb") and two[b].get("peak_memory_mb")]
        if peaks and ratios:
            growth = (peaks[-1] - peaks[0]) / peaks[0]
            flat = abs(growth) < 0.15
            expect_flat = model == "mlp3"
            trend = (f"the single model's peak {'stays flat' if flat else 'grows'} "
                     f"({100 * growth:+.0f}% from the smallest to the largest batch)")
            pair = ("about the sum, as in the paper" if min(ratios) > 1.7 else
                    "less than the sum, unlike the paper: most of this small model's peak is "
                    "TensorFlow's set-up of the step, paid once per pack, not per model")
            readings.append(
                f"**{model}:** {'agrees' if flat == expect_flat else 'differs'} on the trend: "
                f"{trend}; the paper saw {'MLP-3 stay flat' if expect_flat else 'CNNs grow'}; "
                f"two models take {min(ratios):.2f}x to {max(ratios):.2f}x one: {pair}.")
    return res.section_end(out, "memory",
                           ["model", "batch", "1 model peak MB", "2 models peak MB", "2 / 1",
                            "1 model estimate MB", "2 models estimate MB", "1 model process MB",
                            "status"], body, readings)


def section_switch(res: Results) -> list[str]:
    out = ["## Table 2: switching overhead", "",
           "Te(Seq): two models trained one after the other for an epoch, each loaded (built, "
           "step function compiled), trained and unloaded (checkpointed). Te(single): one "
           "model's training steps. SwOH = Te(Seq) - sum of Te(single). Te(Pack): both loaded, "
           "trained together and unloaded. Times in seconds. The paper's Seq is twice its "
           "Single plus its Switch OH.", ""]
    body = []
    readings = []
    for model, setup in SETUPS.items():
        paper = setup.table2
        rows = res.get(model, "switch_overhead") or []
        for r in rows:
            body.append([model, r["num_models"], r["xla"], f"{r['steps_per_epoch']} steps",
                         num(r["te_seq_s"]), num(r["te_single_s"]), num(r["swoh_s"]),
                         num(r["te_pack_s"]), f"{num(r['swoh_per_switch_steps'])} steps",
                         f"{paper[0]} / {paper[1]} / {paper[2]}"])
        if not rows:
            body.append([model, 2, "-", "-", "-", "-", "-", "-", "-",
                         f"{paper[0]} / {paper[1]} / {paper[2]}"])
            continue
        r = rows[0]
        finding = rules.read_switch(f"{model} ({setup.name})", r, paper)
        readings.append(
            f"{finding} Our epoch is {r['steps_per_epoch']} steps of batch {r['batch_size']} "
            f"against the paper's 10,000 ImageNet images; one switch costs about "
            f"{num(r['swoh_per_switch_s'])} s (the time of {num(r['swoh_per_switch_steps'])} "
            f"training steps). Packed, the epoch took {num(r['te_pack_s'])} s against "
            f"{num(r['te_seq_s'])} s one after the other ({num(r['pack_build_s'])} s of it "
            "building the joint step).")
    # body has a row for every model, measured or not, so the table always shows.
    return res.section_end(out, "switch_overhead",
                           ["model", "N", "XLA", "epoch", "Te(Seq) s", "Te(single) s",
                            "SwOH s", "Te(Pack) s", "SwOH per switch",
                            "paper Seq / Single / SwOH s (GPU)"], body, readings)


def section_concurrency(res: Results) -> list[str]:
    out = ["## Section 4.7: one pack against concurrent processes", "",
           "Paper (GPU, two processes, same model, optimizer and batch size): only MLP fitted "
           "as two processes (the others ran out of GPU memory: each process duplicates the "
           "TensorFlow context and the data). MLP step time: at batch 32, 184 ms as two "
           "processes against 200 ms packed; at batch 100, 1660 ms against 1500 ms.", "",
           "Ours: two processes time their steps over the same span; *concurrent* is the slower "
           "process's median step (both models advance one step in it). Memory is each "
           "process's whole peak, summed, against the pack process's peak; over the device's "
           "limit is recorded as out_of_memory.", ""]
    body, readings = [], []
    for model in res.models("concurrency"):
        rows = res.get(model, "concurrency")
        for r in rows:
            body.append([model, r["num_models"], r["batch_size"], num(r.get("ts_concurrent_ms")),
                         num(r.get("ts_pack_ms")), num(r.get("concurrent_over_pack")),
                         num(r.get("peak_memory_concurrent_mb")),
                         num(r.get("peak_memory_pack_mb")),
                         f"{r['status_concurrent']} / {r['status_pack']}"])
        both = [r for r in rows if r.get("concurrent_over_pack")]
        if both:
            first, last = both[0], both[-1]
            memory = statistics.mean(r["peak_memory_concurrent_mb"] / r["peak_memory_pack_mb"]
                                     for r in both)
            faster = "the pack" if last["concurrent_over_pack"] > 1 else "the processes"
            readings.append(
                f"**{model}:** Ts(concurrent) / Ts(Pack) is {num(first['concurrent_over_pack'])} "
                f"at batch {first['batch_size']} and {num(last['concurrent_over_pack'])} at batch "
                f"{last['batch_size']} (paper's MLP: 0.92 at 32, 1.11 at 100); {faster} "
                f"{'win' if faster == 'the processes' else 'wins'} at the largest batch, "
                f"{'as in the paper' if faster == 'the pack' else 'unlike the paper'}; the "
                f"processes take {memory:.1f}x the pack's memory, which agrees with the "
                "paper's reason for their out-of-memory errors.")
    return res.section_end(out, "concurrency",
                           ["model", "N", "batch", "Ts(concurrent) ms", "Ts(Pack) ms",
                            "concurrent / pack", "processes MB", "pack MB",
                            "status processes / pack"], body, readings)


def section_kerastuner(kt: dict[str, Any] | None) -> list[str]:
    out = ["## KerasTuner's Hyperband against packexp's packed Hyperband", "",
           "`python scripts/compare_kerastuner.py`: the same data, model, search space "
           "(Table 3), R, eta and seed, each search in its own child process of the script, "
           "one after the other. Wall time is the search itself (process start-up excluded).",
           ""]
    if not kt:
        return [*out, "Not run (--skip-kerastuner).", ""]
    if "error" in kt:
        return [*out, f"Failed: `{kt['error'].splitlines()[-1]}`", ""]
    body = []
    for name, key in (("packexp, strategy=knn", "packexp_knn"),
                      ("KerasTuner Hyperband", "kerastuner_hyperband")):
        r = kt[key]
        body.append([name, f"{r['wall_time_s']:.1f}", r["configurations"],
                     f"{r['best_val_accuracy']:.4f}",
                     ", ".join(f"{k}={v}" for k, v in r["best_hparams"].items())])
    ratio = kt["wall_time_ratio"]
    p, k = kt["packexp_knn"], kt["kerastuner_hyperband"]
    out += [f"{kt['model']} on {kt['dataset']}, R={kt['R']}, eta={kt['eta']}, "
            f"seed {kt['seed']}.", "",
            table(["search", "wall time s", "configurations", "best val_accuracy",
                   "best hyper-parameters"], body), "",
            f"KerasTuner took {ratio:.2f}x packexp's wall time; best validation accuracy "
            f"{k['best_val_accuracy']:.4f} against packexp's {p['best_val_accuracy']:.4f}. The "
            "searches are not step for step alike: KerasTuner's Hyperband has its own bracket "
            f"arithmetic ({k['configurations']} configurations against packexp's "
            f"{p['configurations']} from Li et al.'s), trains through `model.fit` with its "
            "partial last batch, and each search samples its own configurations from its seed.",
            ""]
    return out


def order_text(walls: dict[str, float]) -> str:
    """Strategies fastest first, with "<" between clear gaps and "~" within 5%."""
    ranked = sorted(walls, key=walls.get)
    text = ranked[0]
    for a, b in itertools.pairwise(ranked):
        text += f" {'~' if walls[b] <= 1.05 * walls[a] else '<'} {b}"
    return text


def order_against_paper(walls: dict[str, float]) -> tuple[int, int, list[str]]:
    """Pairs of the paper's strategies in the paper's order here: (agreeing, all, flipped).

    A pair within 5% of each other counts as neither agreeing nor flipped: one run on a
    shared machine cannot separate them.
    """
    paper = [s for s in PAPER_ORDER if s in walls]
    agree, flipped = 0, []
    pairs = list(itertools.combinations(paper, 2))  # (faster in the paper, slower)
    for fast, slow in pairs:
        if walls[fast] * 1.05 < walls[slow]:
            agree += 1
        elif walls[slow] * 1.05 < walls[fast]:
            flipped.append(f"{slow} beat {fast}")
    return agree, len(pairs), flipped


def cpu_against_gpu(runs: Sequence[dict[str, Any]], share: float | None) -> str:
    """The plain statement of where this CPU's Table 4 differs from the paper's GPU, and why."""
    paper_m, default_m = list(METHODS)
    by = {(r["R"], r["method"], r["strategy"]): r for r in runs}

    def gain(key: tuple[int, str, str]) -> float | None:
        none = by.get((key[0], key[1], "none"))
        return none["wall_time_s"] / by[key]["wall_time_s"] if none else None

    papers = [(gain(k), k) for k in by if k[2] in PAPER_ORDER and k[2] != "none" and gain(k)]
    best_gain, best_key = max(papers, default=(None, None))
    slower = sorted({f"{s} at R={r}" for (r, m, s) in by if m == paper_m
                     and (r, default_m, s) in by and by[(r, m, s)]["wall_time_s"]
                     > 1.05 * by[(r, default_m, s)]["wall_time_s"]})
    accuracy = {(r, s): {by[(r, m, s)].get("best_val_accuracy") for m in METHODS
                         if (r, m, s) in by} for (r, _, s) in by}
    differ = sorted({f"{s} at R={r}" for (r, s), values in accuracy.items() if len(values) > 1})
    trains = [r["train_share"] for r in runs if r.get("train_share") is not None]
    if best_gain is None or best_gain <= 1.05:
        gain_text = "none of the paper's three packing strategies beat `none` here by more than 5%"
    else:
        gain_text = (f"the best of the paper's three here was {best_key[2]} at R={best_key[0]} "
                     f"under {best_key[1]}, {best_gain:.2f}x faster than `none`")
    text = (f"**Where this CPU differs from the paper's GPU, and why.** The paper's packing "
            f"strategies were up to {PAPER_MLP3_SPEEDUP:.1f}x faster than the original "
            f"Hyperband for MLP-3, in the order kNN, Random, Batch-size; {gain_text}. Two "
            "things behind the paper's gains are missing here. (1) *Compute share:* on the GPU "
            "one MLP-3 left most of the device idle, so packing filled it (up to 80% less "
            "step time in Figure 4a), and its searches were hours of such steps (Table 4).")
    if trains:
        text += (f" Here training steps were only {100 * min(trains):.0f}% to "
                 f"{100 * max(trains):.0f}% of a search's wall time; the rest is setting packs "
                 "up (building models, tracing steps), evaluating and checkpointing, which "
                 "packing does not share and mixed packs (random, knn) multiply.")
    if share is not None:
        text += (f" One mlp3 member alone ran at {100 * share:.0f}% of this CPU's float32 "
                 "matmul peak (Figure 4a): "
                 + ("the cores are already busy, so a pack has little to fill." if share > 0.3
                    else "a model this small is bound by per-step overheads rather than "
                         "arithmetic, which a pack saves only inside its steps."))
    text += (" (2) *Data already on the device:* the paper's pack saved one host-to-GPU copy "
             "and one preprocessing pass per batch for all members; here the data sits in the "
             "memory the CPU computes from, so there is no transfer to share.")
    if slower:
        text += (f" The paper's own pack was more than 5% slower than packexp's defaults for "
                 f"{', '.join(slower)}: it retrains every promoted configuration from scratch "
                 "and rebuilds a pack each time a member finishes (the paper's switching "
                 "overhead), where packexp continues from checkpoints and masks.")
    if differ:
        text += (f" Best accuracies differ between the methods for {', '.join(differ)}: "
                 "under `data_sharing=slice` a member trains on its pack-mates' data order.")
    else:
        text += " Both methods found the same best accuracy at every R and strategy."
    return text


def section_table4(table4: dict[str, Any] | None, res: Results) -> list[str]:
    out = ["## Table 4 at digits scale: packed Hyperband by strategy", "",
           "Paper (Quadro P5000, CIFAR-10, Table 3's space, R=81, eta=3; seconds): every "
           "packing strategy beat the original Hyperband, kNN the most, then Random, then "
           "Batch-size. Its Table 4:", "",
           table(["model", "original (none)", "batch_size", "random", "knn", "speedup"],
                 [[m, *(f"{v}" for v in row), f"up to {row[0] / min(row):.1f}x"]
                  for m, row in PAPER_TABLE4.items()]), "",
           "Ours: MLP-3 (`model=mlp3`) on the embedded digits, Table 3's space, eta=3, seed 0, "
           "each search its own `python -m packexp strategy=<s> scheduler.R=<R> tracking=none` "
           "process, in a balanced order (strategies rotated, the two methods alternating). "
           "*paper_method* adds `experiment=paper_method`: the paper's own pack (plain models, "
           "sliced shared batches, switching, retraining on promotion); *packexp defaults* is "
           "packexp as shipped (fusion, gathered batches, masking, continuation). `cost` is "
           "packexp's measured strategy, not in the paper. Wall time is the search's own "
           "(`wall_time_s`, process start-up excluded); one run each, on a CPU shared with "
           "other work (load in the table), so gaps under about 5% are not findings.", ""]
    runs = [r for r in (table4 or {}).get("runs", []) if r.get("returncode") == 0]
    failed = [r for r in (table4 or {}).get("runs", []) if r.get("returncode") != 0]
    if not runs:
        return [*out, "Not run yet: `" + COMMAND + " --only table4`.", "",
                *[f"- **R={r['R']} {r['strategy']} ({r['method']}): failed.** "
                  f"`{r.get('error', '').splitlines()[-1:]}`" for r in failed], ""]
    findings = []
    for r_value in sorted({r["R"] for r in runs}):
        body = []
        at_r = [r for r in runs if r["R"] == r_value]
        for method in METHODS:
            mine = {r["strategy"]: r for r in at_r if r["method"] == method}
            none = mine.get("none", {}).get("wall_time_s")
            for strategy in STRATEGIES:
                if strategy not in mine:
                    continue
                r = mine[strategy]
                body.append([method, strategy, f"{r['wall_time_s']:.1f}",
                             f"{none / r['wall_time_s']:.2f}x" if none else "-",
                             num(r.get("best_val_accuracy"), 4), r.get("packs", "-"),
                             f"{r['load_before']:.1f} / {r['load_after']:.1f}"])
            walls = {s: r["wall_time_s"] for s, r in mine.items()}
            if len(walls) >= 2:
                agree, pairs, flipped = order_against_paper(walls)
                best = max(mine.values(), key=lambda r: r.get("best_val_accuracy") or 0)
                fastest = min(walls, key=walls.get)
                speed = (f"{walls['none'] / walls[fastest]:.2f}x over none"
                         if "none" in walls else "")
                findings.append(
                    f"- **R={r_value}, {method}:** fastest first {order_text(walls)}; "
                    f"{agree} of {pairs} pairs of the paper's strategies in the paper's order"
                    f"{' (' + ', '.join(flipped) + ')' if flipped else ''}; the fastest, "
                    f"{fastest}, {speed} against the paper's {PAPER_MLP3_SPEEDUP:.1f}x for "
                    f"MLP-3 (knn over none); best "
                    f"accuracy {num(best.get('best_val_accuracy'), 4)} ({best['strategy']}).")
        both = {m: {r["strategy"]: r["wall_time_s"] for r in at_r if r["method"] == m}
                for m in METHODS}
        common = set.intersection(*(set(v) for v in both.values())) if all(
            both.values()) else set()
        if common:
            paper_m, default_m = list(METHODS)
            ratios = {s: both[paper_m][s] / both[default_m][s] for s in sorted(common)}
            findings.append(
                f"- **R={r_value}, the paper's pack against packexp's:** "
                + ", ".join(f"{s} {v:.2f}x" for s, v in ratios.items())
                + " the wall time of packexp's defaults.")
        out += [f"### R={r_value}", "",
                table(["method", "strategy", "wall time s", "speedup vs none",
                       "best val_accuracy", "packs", "load before / after"], body), ""]
    out += ["### Reading", "", *findings, ""]
    share = None
    rows = res.get("mlp3", "num_models") or []
    one = next((r for r in ok(rows) if r["num_models"] == 1
                and r.get("seq_peak_share") not in (None, "")), None)
    if one:
        share = one["seq_peak_share"]
    out += [cpu_against_gpu(runs, share), ""]
    if failed:
        out += [f"- **R={r['R']} {r['strategy']} ({r['method']}): failed.** "
                f"`{r.get('error', '').splitlines()[-1:]}`" for r in failed] + [""]
    out += ["GPU rows pending: MobileNet, ResNet-50 and DenseNet-121 as in the paper's "
            "Table 4 need a GPU and CIFAR-10 (`python -m packexp -m experiment=paper_table4 "
            "model=<model> strategy=none,batch_size,random,knn,cost "
            "dataset.path=<cifar-10-python.tar.gz>`).", ""]
    return out


def render(manifest: dict[str, Any]) -> str:
    res = Results(manifest)
    info = manifest["machine"]
    gpu = info["gpu"] or "none (NVML found no NVIDIA device)"
    ran = [m for m in SETUPS if any(r["model"] == m for r in manifest["runs"])]
    pending = [m for m in SETUPS if SETUPS[m].gpu_only and not info["gpu"]]
    lines = [
        "# Reproducing the paper's profiling (section 4) and Table 4", "",
        f"Generated by `{COMMAND}` on {manifest['date']} at commit {manifest['commit']}; it "
        f"took {max(1, round(manifest['wall_s'] / 60))} min. Regenerate it, with the figures in "
        "`docs/results/`, by that one command (`--help` for subsets). Every table below comes "
        "from the runs' `profile.csv` or `results.json`, every reading from the rules in "
        "`packexp/profile/readings.py` and the script applied to them.",
        "", "## Machine", "",
        table(["", ""], [
            ["CPU", f"{info['cpu']}, {info['physical_cores']} cores "
                    f"({info['logical_cores']} logical); oneDNN "
                    f"{ {True: 'on', False: 'off'}.get(info.get('onednn'), 'unknown')}"],
            ["memory", f"{info['ram_gb']:.0f} GB"],
            ["GPU", gpu],
            ["software", f"Python {info['python']}, TensorFlow {info['tensorflow']}, Keras "
                         f"{info['keras']}, KerasTuner {info['keras-tuner']}"],
            ["OS", info["os"]],
            ["load average", f"{manifest['load_start']:.2f} at the start, "
                             f"{manifest['load_end']:.2f} at the end (1 minute; other work "
                             "on the machine shows here)"]]),
        "",
    ]
    if pending:
        lines += [f"**GPU rows are pending: no GPU was present on this machine.** "
                  f"{', '.join(SETUPS[m].name for m in pending)} (and the GPU figures of every "
                  "model: the paper measured on an NVIDIA Quadro P5000) need a GPU; "
                  f"`{COMMAND}` runs them where NVML finds one.", ""]
    lines += ["## What ran", "",
              "The paper measured on a GPU with 10,000 ImageNet images at 224x224; this "
              "reproduction measures packexp's engine on this machine's CPU, with data that "
              "fits it. Memory limit: `device.memory_budget_mb` (4096 MB by default) on a CPU. "
              "Ts(Seq) is never handicapped: each member trains alone in its own pack, with the "
              "faster of XLA on and off where both ran. Every arm is built and warmed up "
              "before any is timed, then timed in ABBA order (odd repeats in reverse), so "
              "neither always runs first; step times are medians over the repeats, and IMPV "
              "the median of the repeats' paired IMPVs with their range. The profile "
              "experiments build on `experiment=paper_method`: plain (unfused) packs and "
              "sliced shared batches, the paper's own pack.", ""]
    body = []
    for model in ran:
        for r in [r for r in manifest["runs"] if r["model"] == model]:
            extra = [o for o in r["overrides"] if o.startswith("profile.")]
            body.append([model, r["profile"], f"{r['wall_s']:.0f}",
                         f"{r['load_before']:.1f} / {r['load_after']:.1f}",
                         " ".join(f"`{o}`" for o in extra) or "defaults",
                         "ok" if r["returncode"] == 0 else "failed"])
    lines += [table(["model", "profile", "seconds", "load before / after", "overrides",
                     "result"], body), "",
              "Load is the 1-minute load average: above the 2 cores, other processes shared "
              "the CPU during that run, and its timings are noisier.", ""]
    lines += [f"- **{m}**: {SETUPS[m].label}" for m in ran]
    lines += [f"- **{m}**: {SETUPS[m].label}: pending (needs a GPU)" for m in pending] + [""]
    lines += section_sweep(
        res, "num_models", "num_models", "## Figure 4a: number of packed models",
        "Paper (GPU, batch 32, models sharing data and batch size): IMPV rises with the number "
        "of models until the GPU saturates; packing MLP-3s saves up to ~80% of the time; four "
        "DenseNet-121 ran out of memory.")
    lines += section_sweep(
        res, "batch_size", "batch_size", "## Figure 4b: batch size, two packed models",
        "Paper (GPU): IMPV changes little as the batch grows from 32 (the models are "
        "compute-bound); ResNet-50 and DenseNet-121 ran out of memory at batch 80 and 64.")
    lines += section_ablation(res)
    lines += section_memory(res)
    lines += section_switch(res)
    lines += section_concurrency(res)
    lines += section_kerastuner(manifest.get("kerastuner"))
    lines += section_table4(manifest.get("table4"), res)
    benchmarks = DOCS / "BENCHMARKS.md"
    if benchmarks.exists():  # bench_pack / bench_search figures, recorded by hand
        lines += section_benchmarks(benchmarks)
    if pending:
        lines += ["## GPU rows: pending", "",
                  "No GPU was present, so these were not measured: "
                  + "; ".join(f"{SETUPS[m].name} in every profile" for m in pending)
                  + "; and every profile of MLP-3 and MobileNet on a GPU, which is where the "
                  "paper's own numbers come from.", ""]
    return "\n".join(lines).rstrip() + "\n"


def section_benchmarks(path: Path) -> list[str]:
    """A pointer to docs/BENCHMARKS.md (bench_pack and bench_search figures): each figure is
    written once, there."""
    title = path.read_text().splitlines()[0].lstrip("# ")
    return [f"## {title}", "",
            f"Recorded by hand, with their commands and dates, in [{path.name}]({path.name}).",
            ""]


def copy_figures(manifest: dict[str, Any]) -> None:
    FIGURES.mkdir(parents=True, exist_ok=True)
    for record in manifest["runs"]:
        png = ROOT / record["run_dir"] / "profile.png"
        if record["returncode"] == 0 and png.exists():
            shutil.copyfile(png, FIGURES / f"{record['model']}-{record['profile']}.png")


def main(argv: Sequence[str] | None = None,
         runner: Callable[[str, str, Setup], dict[str, Any]] = run_profile,
         searcher: Callable[[int, str, str], dict[str, Any]] = run_search) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", default=list(PARTS), choices=list(PARTS),
                   help="the parts to measure; the others stay as last measured")
    p.add_argument("--models", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    p.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    p.add_argument("--R", nargs="+", type=int, default=list(TABLE4_R), dest="rs",
                   help="Table 4's Hyperband budgets")
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES),
                   choices=list(STRATEGIES), help="Table 4's strategies")
    p.add_argument("--skip-kerastuner", action="store_true")
    p.add_argument("--render-only", action="store_true",
                   help="rewrite docs/RESULTS.md from the last run's outputs")
    args = p.parse_args(argv)
    manifest_path = OUT / "manifest.json"
    if args.render_only:
        manifest = json.loads(manifest_path.read_text())
    else:
        OUT.mkdir(parents=True, exist_ok=True)
        parts = set(args.only) - ({"kerastuner"} if args.skip_kerastuner else set())
        info = machine()
        start, load = time.perf_counter(), os.getloadavg()[0]
        runs = []
        if "profiles" in parts:
            for model in args.models:
                if SETUPS[model].gpu_only and not info["gpu"]:
                    print(f"{model:>12} pending: needs a GPU", file=sys.stderr)
                    continue
                runs += [runner(model, profile, SETUPS[model]) for profile in args.profiles]
        kerastuner = run_kerastuner() if "kerastuner" in parts else None
        t4_start = time.perf_counter()
        searches = ([searcher(*x) for x in table4_schedule(args.rs, args.strategies,
                                                           list(METHODS))]
                    if "table4" in parts else [])
        t4_wall = time.perf_counter() - t4_start
        wall = time.perf_counter() - start
        whole = (parts == set(PARTS) and set(args.models) >= set(SETUPS)
                 and set(args.profiles) >= set(PROFILES) and set(args.rs) >= set(TABLE4_R)
                 and set(args.strategies) >= set(STRATEGIES))
        table4 = {"runs": searches, "wall_s": t4_wall}
        if manifest_path.exists() and not whole:
            # A subset: the other runs stay as last measured.
            earlier = json.loads(manifest_path.read_text())
            done = {(r["model"], r["profile"]) for r in runs}
            runs = [r for r in earlier["runs"] if (r["model"], r["profile"]) not in done] + runs
            runs.sort(key=lambda r: (list(SETUPS).index(r["model"]),
                                     PROFILES.index(r["profile"])))
            kerastuner = kerastuner or earlier.get("kerastuner")
            old = (earlier.get("table4") or {}).get("runs", [])
            searched = {(r["R"], r["strategy"], r["method"]) for r in searches}
            kept = [r for r in old if (r["R"], r["strategy"], r["method"]) not in searched]
            table4 = {"runs": kept + searches,
                      "wall_s": t4_wall + (earlier.get("table4") or {}).get("wall_s", 0.0)
                      if kept else t4_wall}
            load = max(load, earlier["load_start"])
            wall = (sum(r["wall_s"] for r in runs) + table4["wall_s"]
                    + (kerastuner or {}).get("wall_s", 0.0))
        manifest = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    "commit": commit(), "machine": info, "runs": runs,
                    "kerastuner": kerastuner, "table4": table4, "load_start": load,
                    "wall_s": wall, "load_end": os.getloadavg()[0]}
        manifest_path.write_text(json.dumps(manifest, indent=2))
    copy_figures(manifest)
    (DOCS / "RESULTS.md").write_text(render(manifest))
    print(f"wrote {DOCS / 'RESULTS.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
