"""The running attempt's number has one owner, the attempt (attempts/restart.py's
ResilientAttempt moves it at a restart in place): the monitor's board (``mpilaunch top``,
/metrics) is told at a restart in place as the starter tells it at a relaunch, and the
attempt's record carries the same number."""
from collections import namedtuple

from mpilaunch.attempts import restart
from mpilaunch.attempts.monitoring import LazyBoard
from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.config.mpi import OMPI5, MpiInfo
from mpilaunch.config.resilience import Resilience
from mpilaunch.contract import RESTART_EVENT
from mpilaunch.output.summary import Event

OMPI = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
Job = namedtuple("Job", "control ended")


def test_a_restart_in_place_moves_the_board_to_the_next_attempt():
    lr = Resilience(3, 0.0, None, None, False, "/l", False, True, in_place=True)
    att = restart.ResilientAttempt(0, lr, 2)
    collector = att.collector(OMPI)
    board = LazyBoard(5.0)
    board.attempt_started(0, 2, collector, None)     # the starter's, as it started
    att.started(Job(None, False), board)
    collector.feed_status(Event(1, "h1", "worker", RESTART_EVENT, 3, None, "self", None, [], 1.0))
    view = board.view()
    assert (view.attempt, view.restarts, view.np) == (1, 1, 2)
    rec = att.record()
    assert rec.index == 1 and [r.index for r in rec.in_place] == [0]
    assert rec.in_place[0].failures[0].cause == "rank 1 (worker) on host h1: exit code 3"
