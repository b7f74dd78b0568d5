"""A local Ray cluster that dies with the search that started it, even a SIGKILLed one.

Ray's head processes (GCS, raylet) die with their driver (``PR_SET_PDEATHSIG``), but the
agents the raylet starts poll for their parent and then report its death to the GCS, which is
gone: they outlived a SIGKILLed driver by over 60 s (a dashboard and a runtime-env agent, seen
under a loaded test suite). The reaper is a small process the driver starts beside its cluster.
It holds the read end of a pipe whose write end only the driver has, and every quarter second
notes the descendants of the cluster's head processes. When the pipe reads end-of-file (the
driver exited, however it exited) it SIGKILLs every process it noted that is still the same
process, and their descendants, then exits. A cluster the driver joined (``executor.address``)
is not the driver's, and gets no reaper.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

POLL_S = 0.25
ROOT = str(Path(__file__).resolve().parents[2])  # the reaper imports this packexp


class Reaper:
    """The driver's end: ``watch`` the cluster's head processes; ``close`` ends the reaper,
    which then kills whatever of the cluster is left."""

    def __init__(self) -> None:
        read, self._write = os.pipe()
        self._process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from packexp.executors.reaper import main; "
             "main(int(sys.argv[1]))", str(read)],
            pass_fds=[read], stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)})
        os.close(read)
        os.set_inheritable(self._write, False)

    @property
    def pid(self) -> int:
        return self._process.pid

    def watch(self, pids: Iterable[int]) -> None:
        """Adds processes (and, from then on, their descendants) to what the reaper ends."""
        os.write(self._write, ("".join(f"{pid}\n" for pid in pids)).encode())

    def close(self, timeout_s: float = 30) -> None:
        """Ends the reaper after it has killed what is left of the cluster."""
        if self._write >= 0:
            os.close(self._write)
            self._write = -1
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def cluster_pids() -> list[int]:
    """The head processes of the local cluster ``ray.init`` started in this process."""
    from ray._private import worker

    node = getattr(worker, "_global_node", None)
    if node is None:
        return []
    return [info.process.pid for infos in node.all_processes.values() for info in infos]


def main(fd: int) -> None:
    """The reaper: reads pids from ``fd`` until end-of-file, then kills what they became."""
    import psutil

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides; EOF ends the cluster
    roots: dict[int, float] = {}
    seen: dict[int, float] = {}
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                break
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _note(psutil, int(line), roots)
        for pid in list(roots):
            _note_tree(psutil, pid, roots[pid], seen)
    for pid in list(roots):
        _note_tree(psutil, pid, roots[pid], seen)
    _kill(psutil, {**seen, **roots})


def _note(psutil, pid: int, into: dict[int, float]) -> None:
    with contextlib.suppress(psutil.Error):
        into[pid] = psutil.Process(pid).create_time()


def _note_tree(psutil, pid: int, created: float, seen: dict[int, float]) -> None:
    try:
        process = psutil.Process(pid)
        if process.create_time() != created:
            return  # the pid now names another process
        for child in process.children(recursive=True):
            _note(psutil, child.pid, seen)
    except psutil.Error:
        pass


def _kill(psutil, processes: dict[int, float]) -> None:
    """SIGKILLs each process that is still the one noted, and its current descendants."""
    victims = []
    for pid, created in processes.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() != created:
                continue
            victims += [process, *process.children(recursive=True)]
        except psutil.Error:
            continue
    for process in victims:
        try:
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(victims, timeout=10)
