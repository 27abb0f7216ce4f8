"""A real launch (mpirun, 2 ranks) whose rank 1 raises and then writes a lot of other output, so
its log's last lines do not show the exception: the summary's root cause still names it, with
its file:line, and so does the event record. Once from torch's own ``@record`` error file
(real torch), once from the log's traceback (a plain script, no torch)."""
import json
import os
import re

import pytest

from helpers.launch import clean_env, run

RECORD = """\
import atexit, os, time
from torch.distributed.elastic.multiprocessing.errors import record
def load_batch(n):
    if n == 0:
        raise ValueError(f"bad batch size {n}")
def chatter():
    for i in range(300):
        print("after the exception", i)
@record
def main():
    if os.environ["RANK"] == "1":
        atexit.register(chatter)
        load_batch(0)
    time.sleep(120)
main()
"""

PLAIN = """\
import os, threading, time
def fetch(batch):
    return batch["batch"]
def chatter():
    # from the end of the main thread, after Python printed its traceback: printing alongside
    # it would interleave the two in the log within lines (an exception line is several writes)
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    for i in range(300):
        print("a thread goes on", i)
if os.environ["RANK"] == "1":
    threading.Thread(target=chatter).start()   # not a daemon: it runs on after the exception
    fetch({})
time.sleep(120)
"""


def launch(tmp_path, source):
    script = tmp_path / "train.py"
    script.write_text(source)
    log_dir = tmp_path / "logs"
    p = run(["-np", "2", "--no-scheduler", "--master_port", "0", "--log_dir", str(log_dir),
             str(script)], env=clean_env(), timeout=120, cwd=str(tmp_path))
    records = [json.loads(line) for line in (log_dir / "events.jsonl").read_text().splitlines()]
    return p, str(script), str(log_dir), records


def rank1_exit(records):
    [rec] = [r for r in records if r["kind"] == "process_exit" and r["rank"] == 1]
    return rec


def test_record_names_the_exception_though_the_log_ends_in_other_output(tmp_path):
    pytest.importorskip("torch")
    p, script, log_dir, records = launch(tmp_path, RECORD)
    err = p.stderr
    assert p.returncode == 1, err
    assert re.search(r"  root cause: rank 1 \(worker\) on host \S+: exit code 1: ValueError: bad "
                     r"batch size 0 \(train\.py:5 in load_batch\)\n", err), err
    error_file = os.path.join(log_dir, "error_1.json")
    assert f"  error file: {error_file}\n" in err, err
    tail = [line for line in err.splitlines() if line.startswith("    | ")]
    assert tail[-1] == "    | after the exception 299", err      # the log's tail, as before
    assert not any("ValueError" in line for line in tail), tail
    exc = rank1_exit(records)["exception"]
    assert (exc["type"], exc["message"], exc["file"], exc["line"], exc["function"],
            exc["source"], exc["error_file"]) == (
        "ValueError", "bad batch size 0", script, 5, "load_batch", "error_file", error_file)
    assert records[-1]["kind"] == "job_end" and records[-1]["exception"] == exc


def test_a_script_without_record_has_its_traceback_read_from_the_log(tmp_path):
    p, script, log_dir, records = launch(tmp_path, PLAIN)
    err = p.stderr
    assert p.returncode == 1, err
    assert re.search(r"  root cause: rank 1 \(worker\) on host \S+: exit code 1: KeyError: "
                     r"'batch' \(train\.py:3 in fetch\)\n", err), err
    assert "error file:" not in err, err
    assert "| a thread goes on 299" in err, err
    exc = rank1_exit(records)["exception"]
    assert (exc["type"], exc["file"], exc["line"], exc["source"]) == ("KeyError", script, 3, "log")
