"""An attempt's failures as typed records (output/outcome.py's Failure, made by
output/summary.py's ``failures`` from what the Collector saw): the root cause first, then every
other process that failed on its own; the same record in the attempt's record, the event
record's ``root`` and the Python API's result on its pipe (output/events.py), exact values."""
import json
import os
from collections import namedtuple

from mpilaunch import api
from mpilaunch.attempts import restart
from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.config.mpi import OMPI5, MpiInfo
from mpilaunch.config.resilience import Resilience
from mpilaunch.output import events, outcome
from mpilaunch.output.outcome import Failure, Raised, failures
from mpilaunch.output.summary import Collector, Event
from mpilaunch.supervise.attempt import Attempt

OMPI = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
EXC = {"type": "ValueError", "message": "bad batch size 0", "file": "/home/u/train.py",
       "line": 41, "function": "load_batch", "source": "log"}


def ev(rank, code=None, sig=None, t=1.0, cause="self", host="h1", exc=None, log=None):
    return Event(rank, host, "worker", "exit", code, sig, cause, log, [], t, None, 100 + rank, exc)


def fed(*evs, backend=OMPI):
    c = Collector(backend)
    for e in evs:
        c.feed_status(e)
    return c


def test_the_root_cause_first_then_every_other_process_that_failed_on_its_own():
    c = fed(ev(2, code=3, t=3.0), ev(0, sig=15, t=4.0, cause="terminated"),
            ev(1, code=1, t=2.0, host="h2", exc=EXC, log="/l/worker_1.log"), ev(3, code=0, t=5.0),
            ev(2, code=3, t=6.0))
    root, other = failures(c, 1)
    assert root == Failure(
        "process", "rank 1 (worker) on host h2: exit code 1: ValueError: bad batch size 0 "
        "(train.py:41 in load_batch)", 1, "h2", "worker", 1, None,
        Raised("ValueError", "bad batch size 0", "/home/u/train.py", 41, "load_batch", EXC),
        "/l/worker_1.log", None, 101)
    assert root.exception is not None and root.exception.where == "/home/u/train.py:41"
    assert other == Failure("process", "rank 2 (worker) on host h1: exit code 3", 2, "h1",
                            "worker", 3, None, None, None, None, 102)


def test_an_attempt_without_a_failed_process_names_what_ended_it():
    assert failures(fed(ev(1, code=1)), 143, stopped_by=15)[0] == Failure(
        "stopped", "stopped by SIGTERM", signal=15)
    lost = fed(backend=OMPI)
    lost.unreachable = ["h3"]
    assert failures(lost, 255) == (Failure("host lost", "host h3 lost", host="h3"),)
    assert failures(fed(), 5) == (Failure("unreported", "exit status 5 (no rank reported a failure)"),)
    # a lost host comes first, the processes that failed on their own after it
    lost.feed_status(ev(0, sig=9))
    assert [f.kind for f in failures(lost, 255)] == ["host lost", "process"]


def test_the_attempt_records_them_and_its_cause_is_the_first_s():
    att = Attempt(0)
    att.finish(1, fed(ev(1, code=1), ev(2, code=4, t=2.0)), None)
    rec = att.record()
    assert [f.rank for f in rec.failures] == [1, 2] and rec.cause == rec.failures[0].cause
    ok = Attempt(1)
    ok.finish(0, fed(ev(0, code=0)), None)
    assert (ok.record().failures, ok.record().cause) == ((), "")


def test_a_stall_is_the_root_cause_before_the_processes():
    lr = Resilience(0, 0.0, None, 5.0, False, "/l", False, True)
    att = restart.ResilientAttempt(0, lr, 2)
    att.stalled = {1: ev(1)}
    att.finish(124, fed(ev(0, code=2)), None)
    assert [(f.kind, f.cause) for f in att.record().failures] == [
        ("stalled", "stalled: no progress from ranks 1"),
        ("process", "rank 0 (worker) on host h1: exit code 2")]


def test_json_round_trip_and_a_partial_object():
    f = failures(fed(ev(1, code=1, exc=EXC)), 1)[0]
    assert Failure.from_json(json.loads(json.dumps(f.to_json()))) == f
    assert Failure.from_json({"rank": "1", "code": 7, "exception": {}}) == Failure(
        "unreported", "", code=7)


def test_the_record_and_the_api_get_the_same_failure(tmp_path):
    """The event record's root and the result on the API's pipe come from the attempt's
    failures; the API's ranks from the records this process wrote, not the file."""
    rfd, wfd = os.pipe()
    events.api_channel(str(wfd))
    Cfg = namedtuple("Cfg", "hosts hosts_source np worker_log_name", defaults=(None,))
    LR = namedtuple("LR", "log_dir max_restarts")
    Backend = namedtuple("Backend", "program name")
    events.start(Cfg((), "test", 2), LR(str(tmp_path), 0), Backend("mpirun", "Open MPI 5"), {})
    c = fed()
    for e in (ev(1, code=1, exc=EXC, t=2.0), ev(0, sig=15, t=3.0, cause="terminated")):
        c.feed_status(e)
        events.status(e)
    att = Attempt(0)
    att.finish(1, c, None)
    events.attempt_end(att, c)
    events.summary("mpilaunch: job failed (exit status 1)\n")
    events.job_end(1, 1, failures=att.failures)
    os.unlink(tmp_path / "events.jsonl")   # the API's result is not read back from it
    with os.fdopen(rfd, "rb") as pipe:
        ready, said = pipe.read().decode().splitlines()
    assert ready == f"ready {tmp_path / 'events.jsonl'}"
    res = api._result(said, None, None, 99)
    assert res.status == 1 and res.failures == list(att.failures) and res.root_cause == att.failures[0]
    assert res.summary == "mpilaunch: job failed (exit status 1)\n" and res.attempts == 1
    assert [(r.rank, r.status, r.signal, r.by) for r in res.ranks] == [
        (0, 143, 15, "teardown"), (1, 1, None, "itself")]


def test_no_result_line_is_the_exit_status_alone():
    assert api._result("", "/l/events.jsonl", "/l", 137) == api.Result(
        137, None, [], 0, "/l/events.jsonl", "/l", None, [])
    assert outcome.KINDS == ("process", "host lost", "not started", "stopped", "stalled",
                             "unreported")


def test_the_checker_s_view_of_a_status_line_is_the_namedtuple_it_is():
    """summary.Event is a namedtuple at run time and a typed NamedTuple for mypy only: the two
    name the same fields in the same order."""
    import ast
    import inspect

    from mpilaunch.output import summary

    tree = ast.parse(inspect.getsource(summary))
    [typed] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_Fields"]
    assert tuple(a.target.id for a in typed.body if isinstance(a, ast.AnnAssign)) == Event._fields


def test_the_api_reads_a_result_longer_than_the_pipe_while_it_waits():
    """A result bigger than a pipe's buffer (many ranks, a long summary) is read as it comes:
    the launcher writing it never waits on a parent that waits for it to exit."""
    import subprocess
    import sys

    many = [{"kind": "process_exit", "attempt": 0, "seq": i, "t": 1.0, "rank": i, "role": "worker",
             "host": "h", "status": 0, "cause": "ok", "by": "itself"} for i in range(3000)]
    said = json.dumps({"status": 0, "attempts": 1, "summary": None, "failures": [],
                       "records": many})
    assert len(said) > 4 * 65536
    child = ("import os, sys\nfd = int(sys.argv[1])\nos.write(fd, b'ready /x/events.jsonl\\n')\n"
             "data = sys.stdin.buffer.read()\nwhile data:\n    data = data[os.write(fd, data):]\n")
    rfd, wfd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", child, str(wfd)], pass_fds=(wfd,),
                            stdin=subprocess.PIPE)
    os.close(wfd)
    proc.stdin.write(b"result " + said.encode() + b"\n")
    proc.stdin.close()
    pipe = os.fdopen(rfd, "rb")
    assert pipe.readline() == b"ready /x/events.jsonl\n"
    res = api.Launch(proc, "/x/events.jsonl", "/x", pipe).wait(timeout=60)
    assert res.status == 0 and len(res.ranks) == 3000 and res.ranks[2999].rank == 2999
