"""The root cause's exception as the summary, the attempts' list and the event record show it
(mpilaunch/output/exctext.py, summary.py, events.py): exact text per case."""
import json

from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.config.mpi import OMPI5, MpiInfo
from mpilaunch.output import events
from mpilaunch.output.exctext import exception_text
from mpilaunch.output.outcome import failures
from mpilaunch.output.summary import Collector, Event, render_summary

OMPI = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
VALUE_ERROR = {"type": "ValueError", "message": "bad batch size 0", "file": "/home/u/train.py",
               "line": 41, "function": "load_batch", "source": "error_file",
               "error_file": "/logs/error_1.json"}


def failed(exception, code=1, sig=None, tail=("after the exception",)):
    c = Collector(OMPI)
    c.feed_status(Event(1, "h2", "worker", "exit", code, sig, "self", "/logs/worker_1.log",
                        list(tail), 2.0, None, None, exception))
    c.feed_status(Event(0, "h1", "worker", "exit", 143, 15, "terminated", "/logs/worker_0.log",
                        [], 3.0))
    return c


def test_the_root_cause_line_names_the_exception_and_the_tail_stays_below():
    assert render_summary(failed(VALUE_ERROR), 1) == (
        "mpilaunch: job failed (exit status 1)\n"
        "  root cause: rank 1 (worker) on host h2: exit code 1: ValueError: bad batch size 0 "
        "(train.py:41 in load_batch)\n"
        "  error file: /logs/error_1.json\n"
        "  log: /logs/worker_1.log\n"
        "  last 1 line(s) of the log:\n"
        "    | after the exception\n"
        "  1 worker on 1 host stopped by the teardown\n")
    assert failures(failed(VALUE_ERROR), 1)[0].cause == (
        "rank 1 (worker) on host h2: exit code 1: ValueError: bad batch size 0 "
        "(train.py:41 in load_batch)")


def test_without_an_exception_the_summary_is_as_before():
    assert render_summary(failed(None), 1) == (
        "mpilaunch: job failed (exit status 1)\n"
        "  root cause: rank 1 (worker) on host h2: exit code 1\n"
        "  log: /logs/worker_1.log\n"
        "  last 1 line(s) of the log:\n"
        "    | after the exception\n"
        "  1 worker on 1 host stopped by the teardown\n")


def test_a_chain_a_library_frame_and_a_syntax_error():
    chained = {"type": "RuntimeError", "message": "mat1 and mat2 shapes cannot be multiplied",
               "file": "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "line": 125,
               "function": "forward", "source": "log",
               "caller": {"file": "/home/u/train.py", "line": 41, "function": "step"},
               "first": {"type": "KeyError", "message": "'x'", "file": "/home/u/data/__init__.py",
                         "line": 3, "function": "load", "link": "context"}}
    text = render_summary(failed(chained), 1)
    assert ("  root cause: rank 1 (worker) on host h2: exit code 1: RuntimeError: mat1 and mat2 "
            "shapes cannot be multiplied (linear.py:125 in forward, called from train.py:41 in step)\n"
            "  raised while handling: KeyError: 'x' (data/__init__.py:3 in load)\n"
            "  log: /logs/worker_1.log\n") in text
    assert "error file" not in text     # read from the log
    syntax = {"type": "SyntaxError", "message": "invalid syntax", "file": "/w/bad.py", "line": 2,
              "function": None, "source": "log"}
    assert exception_text(syntax) == "SyntaxError: invalid syntax (bad.py:2)"
    cause = dict(chained, first=dict(chained["first"], link="cause"))
    assert "  caused by: KeyError: 'x'" in render_summary(failed(cause), 1)


def test_a_long_multi_line_message_is_one_cut_line():
    exc = dict(VALUE_ERROR, message="Error(s) in loading state_dict for Net:\n\tMissing key(s): "
               + "w" * 400)
    text = exception_text(exc)
    assert text.startswith("ValueError: Error(s) in loading state_dict for Net: Missing key(s): www")
    assert text.endswith("www... (train.py:41 in load_batch)") and "\n" not in text
    assert exception_text({"type": "KeyboardInterrupt", "message": ""}) == "KeyboardInterrupt"
    assert exception_text({"message": "no type"}) == "no type"


def test_a_signal_with_an_error_file_keeps_both():
    text = render_summary(failed(VALUE_ERROR, code=137, sig=9), 137)
    assert ("  root cause: rank 1 (worker) on host h2: killed by signal 9 (SIGKILL): ValueError: "
            "bad batch size 0 (train.py:41 in load_batch)\n") in text


def test_the_event_record_carries_it(tmp_path):
    class LR:
        log_dir, max_restarts = str(tmp_path), 0

    class Cfg:
        hosts_source, np, hosts, worker_log_name = "test", 2, [], None

    class Backend:
        program = "mpirun"

    c = failed(VALUE_ERROR)

    class Attempt:
        status, cause, stopped_by, failures = 1, "rank 1 failed", None, failures(c, 1)

    events.start(Cfg, LR, Backend, env={"HF_TOKEN": "bad batch"})
    for e in c.events:
        events.status(e)
    events.attempt_end(Attempt, c)
    events.job_end(1, 1)
    recs = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    masked = dict(VALUE_ERROR, message="**** size 0")      # the launcher's secrets too
    exits = {r["rank"]: r for r in recs if r["kind"] == "process_exit"}
    assert exits[1]["exception"] == masked and exits[0]["exception"] is None
    [end] = [r for r in recs if r["kind"] == "attempt_end"]
    assert end["root"]["exception"] == masked
    assert recs[-1]["kind"] == "job_end" and recs[-1]["exception"] == masked
