"""Which restart mode a launch gets (mpilaunch/config/resilience.py restart_mode: in place by
default wherever the adapters can restart a worker), and why an attempt of the in-place mode
was relaunched instead (mpilaunch/attempts/restart.py fallback_reason): in the attempt's
record, the restart event's fields and the attempts' summary."""

import pytest

from helpers.launch import build_config
from mpilaunch.attempts import loop, restart
from mpilaunch.config.resilience import Resilience
from mpilaunch.errors import UsageError
from mpilaunch.output.summary import Event
from mpilaunch.supervise.attempt import AttemptRecord

TORCH = "import torch\n"
MPI4PY = "from mpi4py import MPI\n"


def _lr(tmp_path, argv, source=TORCH):
    cfg = build_config(["-np", "2", *argv], {}, tmp_path, source=source)
    return cfg.resilience


@pytest.mark.parametrize("argv, source, in_place, why", [
    (["--max_restarts", "2"], TORCH, True, "default"),
    (["--max_restarts", "2", "--restart-mode", "relaunch"], TORCH, False, "--restart-mode"),
    (["--max_restarts", "2", "--restart_mode", "in-place"], TORCH, True, "--restart-mode"),
    (["--max_restarts", "2"], MPI4PY, False,
     "default for an MPI program (train.py imports mpi4py): it cannot rejoin a running MPI job"),
    (["--max_restarts", "2", "--exec"], TORCH, False,
     "default with --exec: no adapter to restart the workers in place"),
    ([], TORCH, False, "default"),          # no restarts: nothing to restart
])
def test_in_place_is_the_default_where_the_adapters_can_restart(tmp_path, argv, source,
                                                                in_place, why):
    lr = _lr(tmp_path, argv, source)
    assert (lr.in_place, lr.mode_why) == (in_place, why)


def test_in_place_asked_with_exec_is_refused(tmp_path):
    with pytest.raises(UsageError, match="needs the supervised mode"):
        _lr(tmp_path, ["--max_restarts", "1", "--restart-mode", "in-place", "--exec"])


LR = Resilience(2, 0.0, None, None, False, "/logs", False, True, in_place=True)
DEAD = Event(1, "b", "adapter", "exit", None, 9, "self", None, [], 0.0)


@pytest.mark.parametrize("lr, index, status, stopped, lost, dead, reason", [
    (LR, 0, 255, None, ["b"], [DEAD], "host b lost"),
    (LR, 0, 137, None, [], [DEAD], "the adapter of rank 1 on host b died (killed by signal 9 (SIGKILL))"),
    (LR, 1, 1, None, [], [], "the job ended before its adapters restarted it in place (the starter "
     "or a daemon failed, or the adapters could not reach rank 0's)"),
    (LR, 2, 255, None, ["b"], [], ""),      # the budget's last attempt: nothing follows
    (LR, 0, 0, None, [], [], ""),           # succeeded
    (LR, 0, 143, 15, ["b"], [], ""),        # stopped
    (LR._replace(in_place=False), 0, 255, None, ["b"], [], ""),   # relaunch mode: no fallback
])
def test_fallback_reason(lr, index, status, stopped, lost, dead, reason):
    assert restart.fallback_reason(lr, index, status, stopped, lost, dead) == reason


def test_the_relaunch_says_why_it_was_not_in_place():
    fell = AttemptRecord(1, 137, "rank 1 (adapter) on host b: killed by signal 9 (SIGKILL)",
                         fallback="the adapter of rank 1 on host b died")
    assert restart.relaunch_fields(fell) == {"mode": "relaunch",
                                             "fallback": "the adapter of rank 1 on host b died"}
    assert restart.relaunch_fields(AttemptRecord(0, 1)) == {"mode": "relaunch"}
    first = AttemptRecord(0, 137, "rank 1 (worker) on host a: killed by signal 9 (SIGKILL)",
                          note=restart.IN_PLACE_NOTE)
    fell = fell._replace(note=restart.relaunch_note(fell))
    assert loop.summary([first, fell, AttemptRecord(2, 0)], LR, 0) == (
        "mpilaunch: 3 attempt(s), restart budget 2; exit status 0 (the last attempt's)\n"
        "  attempt 0: exit status 137: rank 1 (worker) on host a: killed by signal 9 (SIGKILL); "
        "restarted in place; logs: /logs/attempt0\n"
        "  attempt 1: exit status 137: rank 1 (adapter) on host b: killed by signal 9 (SIGKILL); "
        "relaunched (the adapter of rank 1 on host b died); logs: /logs/attempt1\n"
        "  attempt 2: succeeded; logs: /logs/attempt2\n")
