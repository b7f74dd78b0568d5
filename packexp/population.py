"""A population's exploits (``scheduler=pbt``) as the search makes them: the members' values
for the next interval, and each replaced member's copy of its donor's end state, kept durable
apart from the member's own checkpoints. No TensorFlow."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from packexp.events import Exploit
from packexp.search_space import SearchSpace, Trial


def exploit_copy(checkpoints: Path, member: str, rung: int, donor: str) -> Path:
    """Where a member's copy of its donor's end state is kept: apart from the member's own
    checkpoints, which retiring it (a diverged member) deletes."""
    return checkpoints / "exploits" / f"{member}-r{rung}-from-{donor}.npz"


def after_exploits(members: Sequence[Trial], exploits: Sequence[Exploit],
                   space: SearchSpace) -> list[Trial]:
    """The members as the next interval trains them: each exploited one with its exploit's
    values and its donor's data order (seed), so with the donor's values it would train
    exactly as the donor."""
    new, by_id = {e.member: e for e in exploits}, {t.trial_id: t for t in members}
    return [dataclasses.replace(t, hparams=dict(new[t.trial_id].hparams),
                                features=space.features(new[t.trial_id].hparams),
                                seed=by_id[new[t.trial_id].donor].seed)
            if t.trial_id in new else t for t in members]


def donor_copy(path: Path, donor: Callable[[], Any], step: int, fresh_slots: bool) -> Any:
    """The member's starting state (a ``MemberState``): the copy at ``path`` when a session
    before a resume wrote it (whole: ``write_state`` renames a complete file into place),
    else ``donor()``'s end state with the step counter at ``step``, written there first."""
    from packexp.packing.member import MemberState, read_state, write_state

    if path.exists():
        return read_state(path)
    state = donor()
    start = MemberState(state.weights, state.slots, step, fresh_slots=fresh_slots)
    write_state(start, path)
    return start
