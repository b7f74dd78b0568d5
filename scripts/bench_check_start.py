"""The command's start before its job: compose, check the config, start TensorFlow; no search.

    farm-bench -n 6 --warmup 1 --vs "python scripts/bench_check_start.py strategy=none" \\
        -- python scripts/bench_check_start.py strategy=cost

Times, as whole processes, what a group's choice adds to the start (docs/BENCHMARKS.md,
"strategy=cost against strategy=none"): the check instantiates the search's parts before
TensorFlow loads, so what their modules import is paid there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

CONF = Path(__file__).resolve().parents[1] / "conf"


def main() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=sys.argv[1:])
    from packexp.app.main import check, start_tensorflow  # after composing, as measured

    check(cfg)
    start_tensorflow()


if __name__ == "__main__":
    main()
