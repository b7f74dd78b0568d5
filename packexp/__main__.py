"""Command line: ``python -m packexp [overrides]``.

Ctrl-C and SIGTERM are handled from the first line: while Hydra and TensorFlow still import
(seconds), an interrupt ends the process with one line and the signal's exit code, as it does
later in a job (``packexp/app/interrupts.py``); the application is ``packexp/app/cli.py``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from packexp.app.interrupts import (
    closing,
    end,
    exit_interrupted,
    raise_if_interrupted,
    raising_interrupts,
)


def run() -> None:
    raising_interrupts()
    code: int | str | None = 0
    try:
        try:
            from packexp.startup import mark

            mark("python")
            from packexp.app.cli import main
            from packexp.app.help import help_argv
            from packexp.app.typos import typos_refused

            mark("imports")

            sys.argv[1:] = help_argv(sys.argv[1:])  # --help GROUP, which Hydra cannot parse
            with typos_refused():  # one line for a key or option misspelt, as for a bad value
                main()
        except SystemExit as exit_:
            code = exit_.code
        raise_if_interrupted()  # one a finalizer swallowed after the job's last dispatch
        closing()
    except KeyboardInterrupt as interrupt:  # outside a job: importing, composing, Hydra's end
        exit_interrupted(interrupt)
    end(code)


if __name__ == "__main__":
    run()
