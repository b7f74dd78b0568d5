"""Resume: a killed run's finished work read back from its journal, typed, and what is left
of its plans. Pure Python.

A resumed search replays this into its book and its scheduler (``PackedSearch.replay``):
results and packs journaled whole are not trained again, and a plan journaled before the
kill is trained as it was planned, each pack under the number an unbroken run gives it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from packexp.events import Exploit, PackRecord, PlanRecord, RungResult


def finished(records: list[dict]) -> list[dict]:
    """The journal's records less the results of packs whose ``pack`` record is missing."""
    packs = {r["pack"]["pack_id"] for r in records if r["event"] == "pack"}
    return [r for r in records if r["event"] != "result" or r["pack_id"] in packs]


def journaled_checkpoints(records: list[dict]) -> set[str]:
    """The checkpoints a resumed search may continue from: each trial's last one whose pack
    was journaled whole."""
    last = {r["trial_id"]: r["checkpoint"] for r in finished(records)
            if r["event"] == "result"}
    return {path for path in last.values() if path}


@dataclass
class Replayed:
    """A killed run's finished work as a resume reads it from the journal, typed.

    Attributes:
        done: Per (bracket, rung), each trial's journaled result, in journal order. Results
            of a pack without its ``pack`` record (the run was killed while the pack was
            committed) are left out: the whole pack trains again, as an unbroken run trained
            it.
        packs: The packs journaled whole.
        plans: Per (bracket, rung), a synchronous scheduler's first plan of the rung.
        keyed: An asynchronous scheduler's plans, each named by its key, in journal order.
        exploits: A population's exploits (``scheduler=pbt``), by the interval they end.
    """

    done: dict[tuple[int, int], dict[str, RungResult]] = field(default_factory=dict)
    packs: list[PackRecord] = field(default_factory=list)
    plans: dict[tuple[int, int], PlanRecord] = field(default_factory=dict)
    keyed: list[PlanRecord] = field(default_factory=list)
    exploits: dict[int, list[Exploit]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: list[dict]) -> Replayed:
        replayed = cls()
        for r in finished(records):
            if r["event"] == "result":
                result = RungResult.from_dict(r)
                replayed.done.setdefault((result.bracket, result.rung), {})[
                    result.trial_id] = result
            elif r["event"] == "pack":
                replayed.packs.append(PackRecord.from_dict(r["pack"]))
            elif r["event"] == "exploit":
                replayed.exploits[r["rung"]] = [Exploit.from_dict(e) for e in r["exploits"]]
            elif r["event"] == "plan":
                plan = PlanRecord.from_dict(r)
                if plan.key is not None:
                    replayed.keyed.append(plan)
                else:
                    replayed.plans.setdefault((plan.bracket, plan.rung), plan)
        return replayed

    @property
    def members(self) -> int:
        """The member results found."""
        return sum(len(v) for v in self.done.values())

    def left(self, plan: PlanRecord,
             todo: Iterable[str]) -> list[tuple[int, list[str], str | None]]:
        """``plan``'s packs that still have members in ``todo``, each with its number in the
        plan (so its ``pack_id`` is the one an unbroken run gives it) and only those members."""
        todo = set(todo)
        groups = [(j, [i for i in pack if i in todo], f)
                  for j, (pack, f) in enumerate(zip(plan.packs, plan.fusion, strict=True))]
        return [(j, g, f) for j, g, f in groups if g]

    @property
    def results(self) -> list[RungResult]:
        """Every replayed result, rung by rung in the order the journal has them."""
        return [result for done in self.done.values() for result in done.values()]

    def planned(self, bracket: int, rung: int,
                todo: Iterable[str]) -> list[tuple[int, list[str], str | None]] | None:
        """The journaled packs of an interrupted synchronous rung still to train, each with its
        number in the rung's plan; None if the rung was not planned, or if its plan does not
        hold exactly ``todo`` (then the rung is planned afresh).

        A pack's results are journaled together, so its members are all done or all to do;
        rebuilding the same packs gives a resumed run exactly the numbers of an unbroken one,
        fused packs included.
        """
        plan = self.plans.get((bracket, rung))
        if plan is None:
            return None
        todo = list(todo)
        groups = self.left(plan, todo)
        if sorted(i for _, g, _ in groups for i in g) != sorted(todo):
            return None
        return groups

    def unfinished(self, bracket: int) -> list[tuple[PlanRecord,
                                                   list[tuple[int, list[str], str | None]],
                                                   list[str]]]:
        """An asynchronous scheduler's journaled plans that still have packs to train: each
        with those packs (``left``) and the plan's members done before the kill, sorted."""
        out = []
        for plan in self.keyed:
            done = self.done.get((bracket, plan.rung), {})
            members = [i for pack in plan.packs for i in pack]
            left = self.left(plan, [i for i in members if i not in done])
            if left:
                out.append((plan, left, sorted(i for i in members if i in done)))
        return out
