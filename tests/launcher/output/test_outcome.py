"""The job's exit status (mpilaunch/output/outcome.py), rule by rule, the same for every backend."""
import signal

import pytest

from mpilaunch.output import outcome
from mpilaunch.backends.hydra import Hydra
from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.backends.srun import Srun
from mpilaunch.config.mpi import IMPI, MPICH, OMPI4, OMPI5, MpiInfo
from mpilaunch.output.summary import Collector, Event

BACKENDS = {
    "ompi5": OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5)),
    "ompi4": OpenMpi(MpiInfo("/usr/bin/mpirun", (4, 1, 4), OMPI4)),
    "mpich": Hydra(MpiInfo("/x/mpiexec.hydra", (5, 0, 2), MPICH)),
    "impi": Hydra(MpiInfo("/x/mpiexec.hydra", (2021, 18, 1), IMPI)),
    "srun": Srun("/usr/bin/srun", "pmix"),
}


def failed(rank, code=None, sig=None, t=1.0, cause="self", role="worker"):
    return Event(rank, "node-a", role, "exit", code, sig, cause, None, [], t)


def collector(backend, *events, text=""):
    c = Collector(backend)
    for e in events:
        c.feed_status(e)
    if text:
        c.feed_text(text, "stdout")
    return c


@pytest.mark.parametrize("name", sorted(BACKENDS))
@pytest.mark.parametrize("starter_rc", [5, 15, 143, 255, -15])
def test_a_failed_rank_s_status_whatever_the_starter_says(name, starter_rc):
    """Rank 1 exits 5 and rank 0 is torn down: each starter reports its own number (srun the
    torn-down rank's 143, mpiexec 15/255 after our SIGTERM); the job's status is rank 1's."""
    c = collector(BACKENDS[name], failed(1, code=5, t=1.0), failed(0, sig=15, t=2.0, cause="terminated"))
    assert outcome.decide(starter_rc, c) == 5


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_killed_rank_is_128_plus_its_signal(name):
    c = collector(BACKENDS[name], failed(0, sig=9, code=137, t=2.0), failed(1, code=3, t=3.0))
    assert outcome.decide(1, c) == 137


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_earliest_self_failure_wins(name):
    c = collector(BACKENDS[name], failed(2, code=7, t=5.0), failed(1, code=3, t=4.0))
    assert outcome.decide(1, c) == 3


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_stop_asked_of_mpilaunch_beats_everything(name):
    c = collector(BACKENDS[name], failed(1, code=5))
    assert outcome.decide(5, c, stopped_by=signal.SIGTERM) == 143
    assert outcome.decide(0, c, stopped_by=signal.SIGINT) == 130


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_stall_then_foreign_grace(name):
    c = collector(BACKENDS[name], failed(1, code=5))
    assert outcome.decide(143, c, stalled=True) == 124
    quiet = collector(BACKENDS[name])
    # the stop signal the adapters got without mpilaunch asking (SIGTERM, or Slurm's)
    assert outcome.decide(0, quiet, foreign_grace=signal.SIGTERM) == 143
    assert outcome.decide(0, quiet, foreign_grace=signal.SIGHUP) == 129
    assert outcome.decide(0, quiet) == 0


def test_lost_host_is_255_even_when_mpirun_says_0():
    text = ("PRTE has lost communication with a remote daemon.\n\n  HNP daemon   : [prterun-vm-1@0,0] "
            "on node vm\n  Remote daemon: [prterun-vm-1@0,2] on node 10.231.0.3\n")
    for rc in (0, 1, 5):
        assert outcome.decide(rc, collector(BACKENDS["ompi5"], failed(1, code=5), text=text)) == 255


def test_hydra_unreachable_host_is_255():
    c = collector(BACKENDS["mpich"], failed(1, sig=15, cause="terminated"))
    c.unreachable = ["10.231.0.3"]
    assert outcome.decide(15, c) == 255


def test_starter_status_when_no_rank_reported():
    for name, b in BACKENDS.items():
        assert outcome.decide(3, collector(b)) == 3
        assert outcome.decide(-9, collector(b)) == 137
        assert outcome.decide(0, collector(b)) == 0


def test_a_success_stays_a_success():
    """A rank's own failure event and a starter exit 0 (a scheduler leaving late after every
    worker succeeded) is not turned into a failure."""
    c = collector(BACKENDS["ompi5"], failed(0, code=1, role="scheduler"))
    assert outcome.decide(0, c) == 0


def test_adapter_usage_error_is_2():
    c = collector(BACKENDS["srun"], Event(0, "vm", "adapter", "error", 2, None, "self", None, [], 1.0))
    assert outcome.decide(143, c) == 2


def test_starters_own_reports_count_when_no_adapter_spoke():
    ompi = ("prterun noticed that process rank 1 with PID 4242 on node vm exited on\nsignal 9 (Killed).\n")
    assert outcome.decide(137, collector(BACKENDS["ompi5"], text=ompi)) == 137
    hydra = ("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 1 PID 4242 RUNNING AT b\n"
             "=   KILLED BY SIGNAL: 9 (Killed)\n")
    assert outcome.decide(255, collector(BACKENDS["impi"], text=hydra)) == 137
    srun = "srun: error: vm: task 1: Exited with exit code 5\nsrun: error: vm: task 0: Terminated\n"
    assert outcome.decide(143, collector(BACKENDS["srun"], text=srun)) == 5
    # each backend reads only its own starter's words
    assert outcome.decide(143, collector(BACKENDS["ompi5"], text=srun)) == 143


def test_a_failure_the_launcher_ended_the_job_at_is_its_status_after_a_stop_only():
    """--max_no_progress_restarts reached in place: the launcher ends the job at that failure
    (attempts/restart.py's verdict), whose status beats what the teardown left behind."""
    from mpilaunch.attempts import restart
    from mpilaunch.config.resilience import Resilience
    from mpilaunch.supervise.attempt import AttemptRecord

    c = collector(BACKENDS["ompi5"], failed(0, sig=15, cause="terminated"))
    c.unreachable = ["h9"]
    assert outcome.decide(-15, c, ended_at=3, stalled=True) == 3
    assert outcome.decide(-15, c, stopped_by=2, ended_at=3) == 130
    att = restart.ResilientAttempt(1, Resilience(5, 0.0, None, None, False, "/l", False, True), 2)
    att.no_progress = AttemptRecord(1, 3, "rank 1 (worker) on host a: exit code 3", progress=False)
    assert outcome.decide(-15, c, **att.verdict()) == 3
