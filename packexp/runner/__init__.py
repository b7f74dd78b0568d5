"""The runner: one loop that carries out any scheduler's decisions (``PackedSearch``), the
configurations it draws, its checkpoint store and its resume from the journal."""

from packexp.runner.checkpoints import CheckpointStore
from packexp.runner.draws import Draws
from packexp.runner.resume import Replayed
from packexp.runner.search import PackedSearch

__all__ = ["CheckpointStore", "Draws", "PackedSearch", "Replayed"]
