"""Ray's reaper (``packexp/executors/reaper.py``), the process a driver starts to end its
cluster's processes if the driver dies: a killed driver's cluster and their children end, and
a closed reaper leaves a process it did not watch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from packexp.testing.config import ROOT
from packexp.testing.processes import wait_until

# A "driver" that starts a reaper, a process tree as a Ray head would (a child that starts a
# grandchild after it is watched), prints the pids, then waits to be killed.
_DRIVER = """
import subprocess, sys, time
from packexp.executors.reaper import Reaper
reaper = Reaper()
head = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"],
    start_new_session=True)
reaper.watch([head.pid])
import psutil
end = time.monotonic() + 60
while not psutil.Process(head.pid).children() and time.monotonic() < end:
    time.sleep(0.05)  # the head has started its grandchild (late on a loaded machine)
time.sleep(1.5)  # the reaper notes the grandchild
print(reaper.pid, head.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.process
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_driver_s_reaper_ends_its_cluster_s_processes_and_their_children(signum):
    import psutil

    driver = subprocess.Popen([sys.executable, "-c", _DRIVER], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, text=True)
    reaper_pid, head_pid = map(int, driver.stdout.readline().split())
    head = psutil.Process(head_pid)
    assert wait_until(head.children, 60)
    [grandchild] = head.children()
    assert grandchild.cmdline() == ["sleep", "600"]
    driver.send_signal(signum)
    driver.wait(30)
    _, alive = psutil.wait_procs([head, grandchild], timeout=10)
    assert not alive, alive
    assert wait_until(lambda: not psutil.pid_exists(reaper_pid)
                      or psutil.Process(reaper_pid).status() == psutil.STATUS_ZOMBIE, 10)


@pytest.mark.process
def test_a_closed_reaper_leaves_a_process_it_did_not_watch():
    import psutil

    from packexp.executors.reaper import Reaper

    bystander = subprocess.Popen(["sleep", "600"])
    try:
        reaper = Reaper()
        reaper.watch([999_999_999])  # no such process: noted as nothing
        reaper.close()
        assert psutil.Process(bystander.pid).status() != psutil.STATUS_ZOMBIE
    finally:
        bystander.kill()
        bystander.wait()
