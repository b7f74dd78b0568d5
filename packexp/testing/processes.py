"""Processes a test starts or waits on: a free port (``free_port``), a Ray's processes
(``ray_processes``, ``describe``), and a condition polled (``wait_until``)."""

from __future__ import annotations

import os
import socket
import time


def free_port() -> int:
    """A loopback port nothing listens on (as the kernel hands it out)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_processes(ray_tmp: str) -> list[int]:
    """The processes of the Ray whose files are in ``ray_tmp`` (``RAY_TMPDIR``)."""
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("RAY_TMPDIR") == ray_tmp and p.pid != os.getpid():
                found.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def describe(pids: list[int]) -> list[str]:
    """Each process as ``pid name status cmdline``, for an assertion's message."""
    import psutil

    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} {p.name()} {p.status()} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            out.append(f"{pid} (gone)")
    return out


def wait_until(condition, timeout_s: float, every_s: float = 0.2) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(every_s)
    return condition()
