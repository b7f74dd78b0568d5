"""The runner: one loop for every scheduler (``search.py``), and the study it writes to
(``study.py``)."""

from packexp.runner.checkpoints import CheckpointStore
from packexp.runner.draws import Draws
from packexp.runner.replay import Replayed
from packexp.runner.search import PackedSearch
from packexp.runner.settings import SearchSettings
from packexp.runner.study import Study

__all__ = ["CheckpointStore", "Draws", "PackedSearch", "Replayed", "SearchSettings", "Study"]
