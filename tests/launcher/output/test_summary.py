"""The failure summary a person reads (mpilaunch/output/summary.py), exact text per case, and the
Collector's status-line parsing and root-cause choice."""
import signal

from mpilaunch.backends.hydra import Hydra
from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.config.mpi import MPICH, OMPI5, MpiInfo
from mpilaunch.output.summary import STATUS_PREFIX, Collector, Event, parse_status_line, render_summary
from mpilaunch.output.outcome import failures

OMPI = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
HYDRA = Hydra(MpiInfo("/x/mpiexec.hydra", (5, 0, 2), MPICH))


def ev(rank, code=None, sig=None, t=1.0, cause="self", role="worker", host="node-a", log=None,
       tail=(), message=None):
    return Event(rank, host, role, "exit", code, sig, cause, log, list(tail), t, message)


def fed(backend, *events, text=""):
    c = Collector(backend)
    for e in events:
        c.feed_status(e)
    if text:
        c.feed_text(text, "stdout")
    return c


def test_a_failed_rank_with_its_log_tail_and_the_others():
    c = fed(OMPI, ev(1, code=3, t=2.0, log="/logs/worker_1.log", tail=[f"line {i}" for i in range(12)]),
            ev(0, sig=15, t=3.0, cause="terminated"), ev(0, sig=15, t=3.1, cause="terminated", role="scheduler"))
    assert render_summary(c, 3) == (
        "mpilaunch: job failed (exit status 3)\n"
        "  root cause: rank 1 (worker) on host node-a: exit code 3\n"
        "  log: /logs/worker_1.log\n"
        "  last 10 line(s) of the log:\n"
        + "".join(f"    | line {i}\n" for i in range(2, 12))
        + "  1 scheduler on 1 host stopped by the teardown\n"
        + "  1 worker on 1 host stopped by the teardown\n")


def test_a_signal_and_an_adapter_error():
    c = fed(OMPI, ev(2, sig=9, code=137))
    assert "  root cause: rank 2 (worker) on host node-a: killed by signal 9 (SIGKILL)\n" in render_summary(c, 137)
    c = fed(OMPI, Event(0, "vm", "adapter", "error", 2, None, "self", None, [], 1.0,
                        "--master-port=8118: already in use"))
    text = render_summary(c, 2)
    assert "  root cause: rank 0 (adapter) on host vm: exit code 2\n" in text
    assert "  error: --master-port=8118: already in use\n" in text


def test_a_stop_asked_of_mpilaunch():
    c = fed(OMPI, ev(0, sig=15, cause="terminated"))
    assert render_summary(c, 143, stopped_by=signal.SIGTERM) == (
        "mpilaunch: job failed (exit status 143)\n"
        "  root cause: stopped by SIGTERM sent to mpilaunch (the user or the platform asked the job to stop)\n"
        "  1 worker on 1 host stopped by the teardown\n")


def test_a_lost_host_in_each_backends_words():
    text = "PRTE has lost communication with a remote daemon.\n  Remote daemon: [x@0,1] on node 10.231.0.3\n"
    assert render_summary(fed(OMPI, ev(1, code=1), text=text), 255) == (
        "mpilaunch: job failed (exit status 255)\n"
        "  root cause: host 10.231.0.3 lost: Open MPI lost its daemon there (host down, crashed or unreachable)\n"
        "  check it with: mpilaunch check --hostfile ... (same options as the launch)\n")
    c = fed(HYDRA)
    c.unreachable = ["b", "c"]
    text = render_summary(c, 255, program="mpiexec")
    assert "  root cause: host b lost: its ssh port no longer answers and Hydra lost its proxy there" in text
    assert "  also lost: c\n" in text


def test_the_starter_itself_killed_or_silent():
    assert render_summary(fed(OMPI), 137, starter_signal=9, program="srun") == (
        "mpilaunch: job failed (exit status 137)\n"
        "  root cause: srun itself was killed by signal 9 (SIGKILL); no rank reported a failure\n")
    assert render_summary(fed(OMPI), 1, program="mpiexec") == (
        "mpilaunch: job failed (exit status 1)\n"
        "  no rank reported a failure; see mpiexec's messages above\n")


def test_scheduler_hint_when_the_guess_was_wrong():
    c = fed(OMPI, ev(0, code=1, role="scheduler"))
    text = render_summary(c, 1, scheduler=(True, "train.py imports mindspore"))
    assert text.endswith("  fix: rank 0 ran a MindSpore scheduler copy of the script (train.py imports "
                         "mindspore); if this is not a MindSpore job, add --no-scheduler\n")


def test_root_cause_is_the_earliest_own_failure_never_a_victim():
    c = fed(OMPI, ev(0, sig=15, t=0.5, cause="terminated"), ev(3, code=7, t=2.0), ev(1, code=3, t=1.0))
    assert c.root_cause().rank == 1
    assert failures(c, 3)[0].cause == "rank 1 (worker) on host node-a: exit code 3"
    assert failures(fed(OMPI), 5)[0].cause == "exit status 5 (no rank reported a failure)"


def test_status_lines_parse_and_bad_ones_are_ignored():
    line = (STATUS_PREFIX + '{"v":1,"rank":1,"host":"b","role":"worker","event":"exit","code":4,'
            '"signal":null,"cause":"self","log":"/l","tail":["x"],"t":5.5}')
    e = parse_status_line(line)
    assert (e.rank, e.host, e.role, e.code, e.signal, e.cause, e.log, e.tail, e.t) == \
        (1, "b", "worker", 4, None, "self", "/l", ["x"], 5.5)
    assert parse_status_line(STATUS_PREFIX + "{not json") is None
    assert parse_status_line("plain output") is None


def test_the_collector_keeps_a_bounded_tail_of_each_stream():
    c = Collector(OMPI)
    c.feed_text("a" * (Collector.TAIL + 10), "stdout")
    c.feed_text("end", "stdout")
    out = c._streams["stdout"].text()
    assert len(out) == Collector.TAIL and out.endswith("end")
