"""The event record, LOG_DIR/events.jsonl (mpilaunch/output/events.py, docs/EVENTS.md): the writer
on its own (records, masking, no record without start), the adapters' lifecycle lines read
back, and real jobs under mpirun: every rank's steps with the pid its worker really had, the
teardown after the root cause, the final status, no secret value, nothing for a dry run."""
import json
import os
import sys
from collections import namedtuple

import pytest

from helpers.launch import clean_env, run
from mpilaunch.output import events
from mpilaunch.config.hostfile import Host
from mpilaunch.rank import status as rank_status
from mpilaunch.backends.base import Backend
from mpilaunch.output.summary import Collector, parse_status_line

Cfg = namedtuple("Cfg", "hosts hosts_source np worker_log_name", defaults=(None,))
LR = namedtuple("LR", "log_dir max_restarts")
Plan = namedtuple("Plan", "np hosts log_dirs", defaults=((),))


class _Backend:
    program, name = "mpirun", "Open MPI 5.0.11"


def _records(log_dir):
    with open(os.path.join(log_dir, "events.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture
def record(tmp_path):
    env = {"MY_API_KEY": "s3cr3t-value-42", "HOME": "/root"}
    events.start(Cfg((Host("a", 2), Host("b", 2)), "the hostfile", 4), LR(str(tmp_path), 0),
                 _Backend(), env)
    yield tmp_path
    events.close()


def test_start_writes_the_launcher_and_the_hosts(record):
    recs = _records(record)
    assert [r["kind"] for r in recs] == ["launcher_start", "hosts"]
    assert all(r["v"] == events.SCHEMA and r["attempt"] == 0 for r in recs)
    assert recs[0]["pid"] == os.getpid() and recs[0]["log_dir"] == str(record)
    assert recs[0]["t"] <= recs[1]["t"]          # the process start, before the hosts
    assert recs[1]["hosts"] == [{"name": "a", "slots": 2}, {"name": "b", "slots": 2}]
    assert (recs[1]["np"], recs[1]["source"], recs[1]["starter"]) == (4, "the hostfile", "mpirun")
    assert events.path() == os.path.join(str(record), "events.jsonl")


def test_every_string_is_masked_by_the_one_secret_rule(record):
    events.emit("note", text="key is s3cr3t-value-42!", argv=["-x", "OBS_SK=abcdef", "RANK=3"],
                nested={"tail": ["x s3cr3t-value-42 y"]})
    rec = _records(record)[-1]
    assert rec["text"] == "key is ****!"
    assert rec["argv"] == ["-x", "OBS_SK=****", "RANK=3"]
    assert rec["nested"] == {"tail": ["x **** y"]}
    assert "s3cr3t" not in open(os.path.join(record, "events.jsonl")).read()


def test_nothing_is_written_without_a_record(tmp_path):
    events.close()
    events.emit("note", x=1)
    events.status(parse_status_line(rank_status.life_line(0, "a", "worker", "started", pid=7)))
    assert events.summary("text") == "" and events.hint() == "" and events.path() is None


def _feed(line):
    events.status(parse_status_line(line.rstrip("\n")))


def test_lifecycle_and_failure_lines_become_records(record):
    events.attempt_start(0, Plan(4, (Host("a", 2),)))
    _feed(rank_status.life_line(1, "a", "adapter", "up", pid=100, t=5.0))
    _feed(rank_status.life_line(1, "a", "worker", "started", pid=101, t=5.1))
    _feed(rank_status.life_line(1, "a", "worker", "output", t=5.2))
    _feed(rank_status.life_line(0, "a", "worker", "exit", code=0, t=5.3))
    _feed(rank_status.status_line(1, "a", "worker", "exit", 3, None, "self", "/l/w1.log", ["boom"], t=6.0))
    _feed(rank_status.status_line(2, "b", "worker", "exit", 143, 15, "terminated", "/l/w2.log", [], t=6.1))
    events.teardown("mpilaunch ended mpirun")      # a second reason: the first one stays
    recs = _records(record)[3:]
    assert [r["kind"] for r in recs] == ["adapter_up", "process_start", "first_output",
                                         "process_exit", "process_exit", "teardown_start",
                                         "process_exit"]
    up, start, out, ok, failed, teardown, victim = recs
    assert (up["rank"], up["pid"], up["host"], up["host_t"]) == (1, 100, "a", 5.0)
    assert (start["pid"], start["role"], start["host_t"]) == (101, "worker", 5.1)
    assert out["host_t"] == 5.2 and out["rank"] == 1
    assert (ok["status"], ok["cause"], ok["by"]) == (0, "ok", "itself")
    assert (failed["status"], failed["by"], failed["log"], failed["tail"]) == (3, "itself", "/l/w1.log", ["boom"])
    assert teardown["reason"] == "rank 1 (worker) failed on a"
    assert (victim["status"], victim["signal"], victim["by"]) == (143, 15, "teardown")
    assert all(r["t"] > 1e9 for r in recs)       # the launcher's clock, not the host's


def test_lifecycle_lines_never_reach_the_failure_logic():
    c = Collector(Backend())
    c.feed_status(parse_status_line(rank_status.life_line(0, "a", "worker", "exit", code=0).rstrip()))
    c.feed_status(parse_status_line(rank_status.life_line(1, "a", "adapter", "up", pid=3).rstrip()))
    assert c.events == [] and c.root_cause() is None


def test_a_new_attempt_has_its_own_teardown_and_the_end_closes_the_record(record):
    events.attempt_start(0, Plan(2, ()))
    events.teardown("first")
    events.attempt_start(1, Plan(2, ()))
    events.teardown("second")
    events.job_end(3, 2)
    events.emit("late", x=1)                       # after the end: nothing
    recs = _records(record)
    kinds = [(r["kind"], r["attempt"]) for r in recs[2:]]
    assert kinds == [("attempt_start", 0), ("teardown_start", 0), ("attempt_start", 1),
                     ("teardown_start", 1), ("job_end", 1)]
    assert recs[-1]["status"] == 3 and recs[-1]["attempts"] == 2
    assert [r["seq"] for r in recs] == list(range(len(recs)))


def test_an_unwritable_log_dir_warns_and_the_launch_goes_on(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    events.start(Cfg((), "", 1), LR(str(blocker / "sub"), 0), _Backend(), {})
    assert events.path() is None
    assert "no event record" in capsys.readouterr().err


WORKER = r'''
import os, sys, time
rank = int(os.environ["RANK"])
open(os.path.join(sys.argv[1], f"pid{rank}"), "w").write(str(os.getpid()))
print(f"rank {rank} up; key {os.environ.get('MY_API_KEY')}", flush=True)
if sys.argv[2] == "fail":
    time.sleep(0.2)
    if rank == 1:
        sys.exit(3)
    time.sleep(30)
'''


def _job(tmp_path, mode, np=3, extra=()):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    logs = tmp_path / "logs"
    p = run(["-np", str(np), "--log_dir", str(logs), "--master_port", "0", *extra, str(script),
             str(tmp_path), mode], env=clean_env(MY_API_KEY="hidden-key-value-77"), cwd=str(tmp_path))
    return p, str(logs)


def test_a_failing_job_is_recorded_step_by_step(tmp_path):
    p, logs = _job(tmp_path, "fail")
    assert p.returncode == 3, p.stderr
    assert p.stderr.rstrip().endswith(f"timeline: mpilaunch report {logs}")
    recs = _records(logs)
    kinds = [r["kind"] for r in recs]
    assert kinds[:3] == ["launcher_start", "hosts", "attempt_start"] and kinds[-1] == "job_end"
    assert recs[-1]["status"] == 3
    for rank in range(3):
        mine = {r["kind"]: r for r in recs if r.get("rank") == rank}
        assert {"adapter_up", "process_start", "first_output", "process_exit"} <= set(mine), rank
        pid = int(open(tmp_path / f"pid{rank}").read())
        assert mine["process_start"]["pid"] == pid            # the worker's own pid
        assert mine["process_start"]["host"] == os.uname().nodename
        assert abs(mine["adapter_up"]["host_t"] - mine["adapter_up"]["t"]) < 5
        assert mine["adapter_up"]["t"] <= mine["process_start"]["t"] <= mine["process_exit"]["t"]
    exits = {r["rank"]: r for r in recs if r["kind"] == "process_exit"}
    assert (exits[1]["status"], exits[1]["by"]) == (3, "itself")
    assert {exits[r]["by"] for r in (0, 2)} == {"teardown"}
    [teardown] = [r for r in recs if r["kind"] == "teardown_start"]
    assert teardown["reason"].startswith("rank 1 (worker) failed")
    assert exits[1]["seq"] < teardown["seq"] < exits[0]["seq"]
    [end] = [r for r in recs if r["kind"] == "attempt_end"]
    assert (end["status"], end["root"]["rank"], end["root"]["role"]) == (3, 1, "worker")
    assert kinds.index("starter_start") < kinds.index("starter_exit") < kinds.index("teardown_end")
    text = open(os.path.join(logs, "events.jsonl")).read()
    assert "hidden-key-value-77" not in text and "****" in text


@pytest.mark.parametrize("tail", ["-1", "none"])
def test_a_successful_job_records_every_exit_0_and_no_teardown(tmp_path, tail):
    # tailed: the relay sees the first output; not tailed: the adapter watches the log
    p, logs = _job(tmp_path, "ok", np=2, extra=("--tail_worker_log", tail))
    assert p.returncode == 0, p.stderr
    recs = _records(logs)
    firsts = {r["rank"]: r for r in recs if r["kind"] == "first_output"}
    starts = {r["rank"]: r for r in recs if r["kind"] == "process_start"}
    assert sorted(firsts) == [0, 1]
    assert all(starts[r]["seq"] < firsts[r]["seq"] for r in (0, 1))
    exits = [r for r in recs if r["kind"] == "process_exit"]
    assert sorted((r["rank"], r["status"], r["cause"]) for r in exits) == [(0, 0, "ok"), (1, 0, "ok")]
    assert "teardown_start" not in [r["kind"] for r in recs]
    assert recs[-1]["kind"] == "job_end" and recs[-1]["status"] == 0
    assert "timeline:" not in p.stderr


def test_a_dry_run_and_a_usage_error_write_no_record(tmp_path):
    (tmp_path / "x.py").write_text("")
    p = run(["--dry-run", "-np", "2", "--log_dir", str(tmp_path / "a"), "x.py"], cwd=str(tmp_path))
    assert p.returncode == 0 and p.stdout.startswith("# mpilaunch ")
    p = run(["-np", "zero", "--log_dir", str(tmp_path / "b"), "x.py"], cwd=str(tmp_path))
    assert p.returncode == 2
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_lifecycle_line_is_json_whatever_the_host_name():
    for host in ('plain', 'q"uote', "back\\slash", "ctl\x01\n", "ünï"):
        line = rank_status.life_line(3, host, "worker", "started", pid=9, t=1.5)
        assert line.endswith("\n") and line.count("\n") == 1
        obj = json.loads(line[len("@@mpilaunch "):])
        assert (obj["host"], obj["pid"], obj["cause"], obj["t"]) == (host, 9, "life", 1.5)
    assert sys.modules.get("mpilaunch.rank.status") is rank_status


def test_the_preflight_is_recorded_per_host(record):
    from mpilaunch.check.results import CheckResult

    events.preflight_start()
    results = [CheckResult("", "", "slots", "ok"),
               CheckResult("a", "10.0.0.1", "resolve", "ok", seconds=0.01),
               CheckResult("a", "10.0.0.1", "ssh", "ok", seconds=0.2),
               CheckResult("b", "", "ssh-port", "fail", "port 22 refused; give --ssh-port", 0.5)]
    assert events.preflight(results) is results
    recs = _records(record)[2:]
    assert [r["kind"] for r in recs] == ["preflight_start", "preflight_host", "preflight_host",
                                         "preflight_end"]
    a, b = recs[1], recs[2]
    assert (a["host"], a["verdict"], a["seconds"]) == ("a", "ok", 0.21)
    assert a["start"] == pytest.approx(recs[0]["t"]) and a["end"] == pytest.approx(recs[0]["t"] + 0.21)
    assert (b["verdict"], b["checks"][0]["message"]) == ("fail", "port 22 refused; give --ssh-port")
    assert (recs[3]["verdict"], recs[3]["failed"]) == ("fail", ["b"])


RESTART = r'''
import os, sys
count = int(os.environ["MPILAUNCH_RESTART_COUNT"])
sys.exit(4 if count == 0 and os.environ["RANK"] == "0" else 0)
'''


def test_a_restart_is_a_second_attempt_with_its_cause(tmp_path):
    script = tmp_path / "r.py"
    script.write_text(RESTART)
    logs = tmp_path / "logs"
    p = run(["-np", "2", "--master_port", "0", "--log_dir", str(logs), "--max_restarts", "1",
             "--restart-mode", "relaunch", str(script)], cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    recs = _records(str(logs))
    [restart] = [r for r in recs if r["kind"] == "restart"]
    assert restart["next_attempt"] == 1 and "rank 0 (worker)" in restart["cause"]
    assert restart["mode"] == "relaunch" and "fallback" not in restart   # asked for
    starts = [r for r in recs if r["kind"] == "attempt_start"]
    assert [(r["attempt"], r["log_dir"]) for r in starts] == [
        (0, str(logs / "attempt0")), (1, str(logs / "attempt1"))]
    ends = [(r["attempt"], r["status"]) for r in recs if r["kind"] == "attempt_end"]
    assert ends == [(0, 4), (1, 0)]
    assert recs[-1]["kind"] == "job_end" and (recs[-1]["status"], recs[-1]["attempts"]) == (0, 2)
    assert os.listdir(str(logs)).count("events.jsonl") == 1      # one record for the job


def test_a_restart_in_place_is_recorded_even_when_the_next_attempt_ends_at_once(tmp_path):
    # the default mode: the same starter runs attempt 1; its record says why attempt 0 was
    # restarted even when attempt 1 ends before the coordinator's window to name the root cause
    # (the last attempt's adapters leave at once: it was lost, and the summary said 1 attempt)
    script = tmp_path / "r.py"
    script.write_text(RESTART)
    logs = tmp_path / "logs"
    p = run(["-np", "2", "--master_port", "0", "--log_dir", str(logs), "--max_restarts", "1",
             str(script)], cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    recs = _records(str(logs))
    [restart] = [r for r in recs if r["kind"] == "restart"]
    assert (restart["next_attempt"], restart["mode"]) == (1, "in-place"), restart
    assert "rank 0 (worker)" in restart["cause"] and "exit code 4" in restart["cause"], restart
    assert [r["attempt"] for r in recs if r["kind"] == "attempt_start"] == [0]   # one starter
    assert recs[-1]["kind"] == "job_end" and (recs[-1]["status"], recs[-1]["attempts"]) == (0, 2)
    assert "attempt 0: exit status 4: rank 0 (worker)" in p.stderr and "restarted in place" in p.stderr
