"""Resume: a killed run's finished work read back from its journal, typed, and what is left
of its plans. Pure Python.

A resumed search tells these facts to its policy in the order they happened
(``PackedSearch.run``): results and packs journaled whole are not trained again, and a plan
journaled before the kill is trained as it was planned, each pack under the number an
unbroken run gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packexp.events import Exploit, PackRecord, PlanRecord, RungResult
from packexp.schedulers.base import Exploits


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
    """A killed run's journal as a resume reads it, typed: the facts a policy is told again
    (``PackedSearch.run``), and what is left of its plans.

    Attributes:
        facts: The plans, results and exploits, in the order they happened. Results of a pack
            without its ``pack`` record (the run was killed while the pack was committed) are
            left out: the whole pack trains again, as an unbroken run trained it.
        done: Per (bracket, rung), each trial's journaled result among ``facts``.
        packs: The packs journaled whole.
        plans: Each plan by its name (``<key>``, or ``b<s>-r<rung>`` for a synchronous rung),
            the first journaled under it, in journal order.
    """

    facts: list[PlanRecord | RungResult | Exploits] = field(default_factory=list)
    done: dict[tuple[int, int], dict[str, RungResult]] = field(default_factory=dict)
    packs: list[PackRecord] = field(default_factory=list)
    plans: dict[str, PlanRecord] = field(default_factory=dict)

    @classmethod
    def of(cls, records: list[dict]) -> Replayed:
        replayed = cls()
        for r in finished(records):
            if r["event"] == "result":
                result = RungResult.from_dict(r)
                replayed.done.setdefault((result.bracket, result.rung), {})[
                    result.trial_id] = result
                replayed.facts.append(result)
            elif r["event"] == "pack":
                replayed.packs.append(PackRecord.from_dict(r["pack"]))
            elif r["event"] == "exploit":
                replayed.facts.append(Exploits(r["bracket"], r["rung"], tuple(
                    Exploit.from_dict(e) for e in r["exploits"])))
            elif r["event"] == "plan":
                plan = PlanRecord.from_dict(r)
                name = plan.key or f"b{plan.bracket}-r{plan.rung}"
                if name not in replayed.plans:  # a rung planned again: the first plan counts
                    replayed.plans[name] = plan
                    replayed.facts.append(plan)
        return replayed

    @property
    def members(self) -> int:
        """The member results found."""
        return sum(len(v) for v in self.done.values())

    def unfinished(self) -> list[tuple[PlanRecord, list[tuple[int, list[str], str | None]],
                                       list[str]]]:
        """The journaled plans that still have packs to train, in journal order: each with
        those packs, numbered as in its plan (so each ``pack_id`` is the one an unbroken run
        gives it) and holding only the members still to train, and the plan's members done
        before the kill, sorted.

        A pack's results are journaled together, so its members are all done or all to do;
        rebuilding the same packs gives a resumed run exactly the numbers of an unbroken one,
        fused packs included.
        """
        out = []
        for plan in self.plans.values():
            done = self.done.get((plan.bracket, plan.rung), {})
            left = [(j, [i for i in pack if i not in done], f)
                    for j, (pack, f) in enumerate(zip(plan.packs, plan.fusion, strict=True))]
            left = [(j, g, f) for j, g, f in left if g]
            if left:
                out.append((plan, left, sorted(i for pack in plan.packs for i in pack
                                               if i in done)))
        return out
