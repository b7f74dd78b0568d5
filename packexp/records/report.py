"""What a task prints: rich tables and summary lines, in one place."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packexp.objectives import REGRESSION_METRICS, measured
from packexp.records.plots import PARETO
from packexp.records.transfer import PREFIX, SCALE_KEY, rank_correlation

if TYPE_CHECKING:
    from packexp.records.search_result import SearchFacts, SearchResult

# Whether a search shows its progress bar and summary: ``packexp.tune(verbose=False)``, a
# library call, turns both off for its job (results.json and the store hold the same).
verbose: ContextVar[bool] = ContextVar("packexp_verbose", default=True)


def print_summary(result: SearchResult, store: str | None, top_k: int,
                  lost: str | None = None, resume: str | None = None) -> None:
    """The search ``result`` as the command prints it: the best configurations, what ended
    the search (with ``resume``, the command that goes on after a budget stop), the time and
    where it went, and where the run, its store and its best model are."""
    if not verbose.get():
        return
    from rich.table import Table

    run_dir, facts, totals = result.run_dir, result.facts, result.totals
    trials, packs, objective = result.trial_records, result.pack_records, result.tuned_for
    # Over stand-ins the full-width trials rank first: the search's best is one of them.
    scale = (facts.surrogate or {}).get("scale")
    rows = sorted(((objective.score(t.last), t.last.epochs, t) for t in trials
                   if t.last and objective.score(t.last) is not None),
                  key=lambda row: (not (scale and row[2].trial_id.startswith(PREFIX)),
                                   -row[0], -row[1]))[:top_k]
    table = Table(title=f"Best configurations ({facts.strategy} packing, "
                        f"{facts.model} on {facts.dataset}, seed {facts.seed})")
    names = list(dict.fromkeys(k for t in trials for k in t.hparams))  # a conditional's too
    shown = shown_metrics(objective)
    for column in ["trial", *names, "epochs", *shown]:
        table.add_column(column, justify="right" if column != "trial" else "left")
    for _, epochs, trial in rows:
        values = trial.hparams_at(epochs)  # a population's member: those it ended with
        if scale and SCALE_KEY in names and SCALE_KEY not in values:  # a stand-in
            values = {**values, SCALE_KEY: scale}
        table.add_row(trial.trial_id, *(_cell(values[n]) if n in values else "-"
                                        for n in names),
                      f"{epochs:g}", *(_metric_cell(measured(trial.last, m)) for m in shown))
    console = _console(160)
    console.print(table)
    if result.front:
        names = [n for n, _ in objective.goals]
        console.print(f"Pareto front of {' and '.join(names)} ({len(result.front)} trials, "
                      f"{run_dir.resolve() / PARETO}): " + ", ".join(
                          f"{e.trial_id} (" + ", ".join(f"{e.values[n]:.4g}" for n in names)
                          + ")" for e in result.front))
    if facts.surrogate:
        console.print(transfer_line(result))
    console.print(ended_line(result, resume))
    if facts.simulated:  # executor=simulated: its clock is the cost model's
        console.print(simulated_line(facts))
    # The search's clock starts at its first pack: the start-up before it (calibration
    # included) is the other figure, so the two add up to the command's time.
    clock = " of simulated time" if facts.simulated else ""
    console.print(f"searched {result.wall_time_s:.1f} s{clock} from the first pack, "
                  f"{len(trials)} trials, "
                  f"{len(packs)} packs ({totals.reused_packs} on reused "
                  f"models and steps; {totals.reused_members} members of other packs "
                  "on reused models); "
                  f"{totals.programs} step programs built "
                  f"({sum(p.programs for p in packs if p.xla)}"
                  f" compiled with XLA, {sum(p.looped for p in packs)}"
                  f" packs looped), {totals.eval_programs} evaluation programs")
    if totals.phases:
        console.print(f"training {totals.train_share:.0%} of the search; "
                      + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s"
                                  for k, v in totals.phases.items())
                      + (f"; start-up {facts.startup_s:.1f} s, from the command to the "
                         "first pack"
                         if facts.startup_s is not None else "")
                      + (f" ({split})" if (split := describe(facts.startup or {}))
                         else ""))
    if totals.prediction_error is not None:
        predicted = [p for p in packs if p.predicted_s is not None]
        expected = sum(p.predicted_s for p in predicted)
        console.print(
            f"cost model: {len(predicted)} packs predicted {expected:.1f} s, "
            f"took {sum(p.duration_s for p in predicted):.1f} s; median relative error "
            f"{totals.prediction_error:.0%}"
            + (f"; {facts.calibration_s:.1f} s calibrating" if facts.calibration_s
               else ""))
    if facts.calibration:
        used = facts.calibration
        console.print(f"planned with calibration {used['digest']} ({used['source']}: "
                      f"{used['path']}); strategy.calibration=<a copy of it> plans alike")
    fused = sum(1 for p in packs if p.fused)
    if fused:
        console.print(f"{fused} of {len(packs)} packs were fused: their members' "
                      "scores match training alone to float32 rounding, not bit for bit "
                      "(pack.fusion=off for bit-exact plain packs)")
    console.print(f"run directory: {run_dir.resolve()}")
    if best := result.best_kept():
        more = len(result.kept) - 1
        whole = str(best["model"]).endswith(".keras")
        console.print(f"best model: {run_dir.resolve() / best['model']}"
                      + (f" (and {more} more in models/)" if more > 0 else "")
                      + ("; keras.saving.load_model(path).predict(rows) takes the rows as "
                         "given" if whole else
                         " (its weights only: Keras could not keep the model whole); "
                         "packexp.load(run_dir).best_model() builds it again where its "
                         "builder imports"))
    if store and lost:
        console.print(f"MLflow store: {store}: tracking was lost mid-search ({lost}); its runs "
                      "are marked FAILED and lack what came after; the run directory's "
                      "results.json has every result")
    elif store:
        console.print(f"MLflow store: {store}  (open with: mlflow ui --backend-store-uri {store})")


def transfer_line(result: SearchResult) -> str:
    """A search over stand-ins: each transferred configuration's stand-in and full-width
    score, and their rank correlation, so a user sees whether the transfer held."""
    pairs, metric = result.transfer, result.tuned_for.metric
    scale = (result.facts.surrogate or {}).get("scale")
    if not pairs:
        return (f"stand-ins at 1/{scale} width: nothing was trained at full width (the search "
                "stopped first?); resume=true with a larger budget transfers its best")
    rho = rank_correlation(pairs)
    shown = ", ".join(f"{p.stand_in} {_metric_cell(p.stand_in_value)} -> "
                      f"{_metric_cell(p.full_value)}" for p in pairs)
    when = " (after the budget stopped the stand-ins' search)" if result.facts.stopped else ""
    return (f"stand-ins at 1/{scale} width, the best {len(pairs)} trained at full width{when} "
            f"({metric}, stand-in -> full): {shown}; rank correlation (Spearman) "
            + ("n/a" if rho is None else f"{rho:.2f}"))


def ended_line(result: SearchResult, resume: str | None = None) -> str:
    """What ended the search (``facts.ended``): its schedule, run to its end, or the budget
    that stopped it early, with ``resume``, the command that goes on where it stopped."""
    facts = result.facts
    if facts.stopped:
        return (f"ended: stopped early by {facts.stopped}; resume it with a larger budget: "
                + (resume or f"resume=true hydra.run.dir={result.run_dir}"))
    which = f"scheduler {facts.scheduler}: " if facts.scheduler else ""
    return (f"ended: the schedule ran to its end ({which}{len(result.trial_records)} "
            f"configurations, {result.totals.epochs_spent:g} epochs trained)")


def simulated_line(facts: SearchFacts) -> str:
    """What a simulated search's summary says first: its times are predictions."""
    settings = facts.simulation or {}
    model = (f"the calibration {settings['calibration']}" if settings.get("calibration")
             else "executor.durations")
    real = facts.real_wall_time_s
    return (f"simulated on {settings.get('workers', '?')} workers: every time below (the "
            f"search's, each pack's, the phases') is a prediction of {model}, not a "
            "measurement" + (f"; the simulation took {real:.1f} s" if real is not None else ""))


def print_plan(payload: dict, path: Path, title: str) -> None:
    """``task=plan``'s bracket table, first-rung packs and what can make the search's differ
    (``payload`` is ``plan.json``), under the title its scheduler gives
    (``Scheduler.plan_title``)."""
    from rich.table import Table

    console = _console(160)
    table = Table(title=title)
    for column in ("bracket s", "rung", "n", "r (epochs)", "epochs, continued",
                   "epochs, from scratch"):
        table.add_column(column, justify="right")
    for record in payload["brackets"]:
        before = 0.0
        for i, rung in enumerate(record["rungs"]):
            n, r = rung["n"], rung["r"]
            table.add_row(str(record["s"]) if i == 0 else "", str(i), str(n), f"{r:g}",
                          f"{n * (r - before):g}", f"{n * r:g}")
            before = r
        table.add_row("", "all", str(sum(r["n"] for r in record["rungs"])), "",
                      f"{record['epochs_continued']:g}", f"{record['epochs_from_scratch']:g}",
                      style="bold", end_section=True)
    continued = sum(b["epochs_continued"] for b in payload["brackets"])
    scratch = sum(b["epochs_from_scratch"] for b in payload["brackets"])
    table.add_row("total", "", str(sum(b["rungs"][0]["n"] for b in payload["brackets"])),
                  "", f"{continued:g}", f"{scratch:g}", style="bold")
    console.print(table)
    evaluations = sum(r["n"] for b in payload["brackets"] for r in b["rungs"])
    console.print(f"{evaluations} evaluations in all")
    capacity = payload["capacity"]
    calibration = payload.get("calibration")
    console.print(f"First-rung packs, as the search forms them, under strategy "
                  f"{payload['strategy']} ({capacity['source']}"
                  + (f", at most {most} members" if (most := capacity["max_members"]) else "")
                  + (f", calibration {calibration['digest']}" if calibration else "") + "):")
    for record in payload["brackets"]:
        sizes = [len(p) for p in record["first_rung_packs"]]
        console.print(f"  bracket {record['s']}: {len(sizes)} packs of {sizes}; batch sizes "
                      f"{record['first_rung_pack_batch_sizes']}")
    if differ := payload.get("run_may_differ"):
        console.print(f"The search can form other packs with: {'; '.join(differ)}. Each "
                      "later rung is packed from the results before it.")
    console.print(f"plan written to {path.resolve()}")


def shown_metrics(objective: Any) -> list[str]:
    """The summary's metric columns: every goal's, and for a regression its MSE, MAE and R²
    too (one number hides an R² that says the fit is poor)."""
    goals = [n for n, _ in objective.goals]
    regression = any(n in REGRESSION_METRICS for n in goals)
    return list(dict.fromkeys([*goals, *(REGRESSION_METRICS if regression else ())]))


def _metric_cell(value: Any) -> str:
    if value is None or isinstance(value, int):  # a parameter count: every digit
        return "-" if value is None else str(value)
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"


def _cell(value: Any) -> str:
    # A float range's draws have 17 digits; four tell them apart in a table.
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _console(width: int) -> Any:
    """A rich console; ``width`` columns where the output is not a terminal (logs, CI)."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a file or a pipe: tables this wide, lines never broken
        console = Console(width=width, soft_wrap=True)
    return console


def cell(value: Any) -> Any:
    """A table's cell: empty for None, a float to 6 significant digits."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def print_profile(profile: Any, rows: list[dict], names: dict[str, str], table: Path,
                  picture: Path, store: str | None) -> None:
    """A profile's measured rows, and where its table, figure and store are."""
    from rich.table import Table

    console = _console(200)
    measured = Table(title=f"profile {profile.name}: {names['model']} on {names['dataset']}")
    columns = profile.shown_columns or profile.columns
    for column in columns:
        measured.add_column(column, justify="right")
    for row in rows:
        measured.add_row(*(str(cell(row.get(c))) for c in columns))
    console.print(measured)
    console.print(f"table: {table.resolve()}")
    console.print(f"figure: {picture.resolve()}")
    if store:
        console.print(f"MLflow store: {store}")


def describe(split: dict[str, float]) -> str:
    """``tensorflow 8.1, calibration 5.0, ...``: the largest phase first, those under 0.05 s
    left out, as the summary prints them."""
    ordered = sorted(split.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{p} {s:.1f}" for p, s in ordered if s >= 0.05)
