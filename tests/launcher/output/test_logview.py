"""`mpilaunch logs`' pure parts (output/logview.py) and its command on log dirs written here
as a job writes them (the real-process runs: tests/e2e/test_console_logs.py)."""
import json
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO
from mpilaunch.errors import UsageError
from mpilaunch.output import logview


@pytest.mark.parametrize("raw, ranks", [("7", {7}), ("0,3", {0, 3}), ("0-3,8", {0, 1, 2, 3, 8}),
                                        (" 2 - 2", None), ("3-1", None), ("x", None), ("", None)])
def test_rank_lists(raw, ranks):
    if ranks is None:
        with pytest.raises(UsageError, match=r"^--rank='.*': not a rank list; give ranks such as 7, 0,3 or 0-47$"):
            logview.parse_ranks(raw)
    else:
        assert logview.parse_ranks(raw) == ranks


@pytest.mark.parametrize("raw, seconds", [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0),
                                          ("-1", None), ("m", None), ("5d", None), ("nan", None)])
def test_durations(raw, seconds):
    if seconds is None:
        with pytest.raises(UsageError, match=r"^--since='.*': not a duration"):
            logview.parse_duration(raw)
    else:
        assert logview.parse_duration(raw) == seconds


def test_the_record_names_hosts_first_outputs_and_the_end():
    records = [{"kind": "adapter_up", "attempt": 0, "rank": 1, "host": "h1", "t": 1.0},
               {"kind": "process_start", "attempt": 0, "rank": 1, "host": "h1", "role": "worker", "t": 2.0},
               {"kind": "process_start", "attempt": 0, "rank": 0, "host": "h0", "role": "worker", "t": 2.5},
               {"kind": "first_output", "attempt": 0, "rank": 1, "host": "h1", "role": "worker", "t": 3.0},
               {"kind": "process_start", "attempt": 1, "rank": 1, "host": "h2", "role": "scheduler", "t": 9.0},
               {"kind": "job_end", "attempt": 1}]
    hosts, starts, ended, launcher = logview.ranks_and_hosts(
        [{"kind": "launcher_start", "attempt": 0, "pid": 42, "host": "h0"}] + records)
    assert hosts == {(0, 1): "h1", (0, 0): "h0", (1, 1): "h2"}
    assert starts == {(0, 1): 3.0, (0, 0): 2.5}
    assert (ended, launcher) == (True, (42, "h0"))
    assert logview.ranks_and_hosts(records[:-1])[2:] == (False, None)


def test_a_launcher_here_that_died_without_its_end_ends_the_job():
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = os.uname().nodename
    assert logview.launcher_gone((dead.pid, here)) is True
    assert logview.launcher_gone((os.getpid(), here)) is False
    assert logview.launcher_gone((dead.pid, here + "-elsewhere")) is False   # not judged from here
    assert logview.launcher_gone(None) is False


def test_attempt_dirs_and_worker_logs_by_number():
    assert logview.attempt_dirs("/L", ["attempt10", "attempt2", "attemptx", "events.jsonl"]) == \
        [(2, "/L/attempt2"), (10, "/L/attempt10")]
    assert logview.attempt_dirs("/L", ["worker_0.log"]) == [(0, "/L")]
    assert logview.worker_logs(["worker_10.log", "worker_9.log", "worker_x.log", "worker_1.log.bak"]) == \
        [(9, "worker_9.log"), (10, "worker_10.log")]


def test_worker_logs_by_the_jobs_own_log_name():
    names = ["train-h1-3.txt", "train-h0-12.txt", ".train-h0-12.txt.times", "worker_0.log", "train-3.txt"]
    template = logview.log_template([{"kind": "launcher_start", "worker_log_name": "train-{hostname}-{rank}.txt"}])
    assert template == "train-{hostname}-{rank}.txt"
    assert logview.worker_logs(names, template) == [(3, "train-h1-3.txt"), (12, "train-h0-12.txt")]
    assert logview.worker_logs(["solo_10.0.0.1.log", "solo.log"], "solo_{ip}.log") == [(0, "solo_10.0.0.1.log")]
    assert logview.log_template([{"kind": "launcher_start"}]) == "worker_{rank}.log"   # an older record


def _logs():
    mk = logview.RankLog
    return [mk(0, 0, "a0r0", "h0.example", 1.0), mk(0, 1, "a0r1", "h1", 1.0), mk(1, 0, "a1r0", "h2", 5.0)]


def test_select_by_rank_host_and_attempt():
    logs = _logs()
    assert [x.path for x in logview.select(logs, ranks=frozenset({0}))] == ["a0r0", "a1r0"]
    assert [x.path for x in logview.select(logs, host="h0")] == ["a0r0"]        # its first label
    assert [x.path for x in logview.select(logs, host="h0.example")] == ["a0r0"]
    assert [x.path for x in logview.select(logs, attempt=1)] == ["a1r0"]
    assert logview.select(logs, ranks=frozenset({1}), attempt=1) == []


def test_a_lines_time_is_its_offsets_share_of_the_span(tmp_path):
    path = tmp_path / "worker_3.log"
    path.write_bytes(b"a" * 49 + b"\n" + b"b" * 49 + b"\n" + b"c" * 99 + b"\n")   # offsets 0, 50, 100 of 200
    os.utime(path, (12.0, 12.0))
    log = logview.RankLog(0, 3, str(path), "h", 10.0)
    assert [(x.t, x.text[:1]) for x in logview.log_lines(log)] == [(10.0, b"a"), (10.5, b"b"), (11.0, b"c")]
    late = log._replace(start=20.0)     # a start after the last change: no span
    assert [x.t for x in logview.log_lines(late)] == [20.0, 20.0, 20.0]


def _write_job(root, attempts, ended=True):
    """A log dir as a job writes it: {attempt: {rank: (text, first_output, mtime, host)}}."""
    records = []
    for k, ranks in attempts.items():
        d = root / f"attempt{k}" if len(attempts) > 1 else root
        d.mkdir(exist_ok=True)
        for rank, (text, first, mtime, host) in ranks.items():
            path = d / f"worker_{rank}.log"
            path.write_bytes(text)
            os.utime(path, (mtime, mtime))
            records.append({"kind": "first_output", "attempt": k, "rank": rank, "host": host,
                            "role": "worker", "t": first})
    if ended:
        records.append({"kind": "job_end", "attempt": max(attempts)})
    (root / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_merged_orders_ranks_by_estimated_time_and_keeps_each_ranks_order(tmp_path):
    _write_job(tmp_path, {0: {0: (b"x0\nx1\nx2\nx3\n", 100.0, 104.0, "h0"),
                              1: (b"y0\ny1\n", 101.0, 102.0, "h1")}})
    job = logview.scan(str(tmp_path))
    assert job.ended
    lines = list(logview.merged(job.logs))
    # x: 100, 101, 102, 103; y: 101, 101.5
    assert [(x.rank, x.text) for x in lines] == [(0, b"x0"), (0, b"x1"), (1, b"y0"), (1, b"y1"),
                                                (0, b"x2"), (0, b"x3")]
    assert b"".join(logview.render(lines[:2], headers=False)) == b"[rank0] x0\n[rank0] x1\n"
    assert [x.text for x in logview.merged(job.logs, pattern=re.compile(b"1"))] == [b"x1", b"y1"]
    assert [x.text for x in logview.merged(job.logs, tail=2)] == [b"x2", b"x3"]
    assert list(logview.merged(job.logs, tail=0)) == []
    assert [x.text for x in logview.merged(job.logs, since=101.9)] == [b"x2", b"x3"]


def test_a_follower_reads_complete_lines_only(tmp_path):
    _write_job(tmp_path, {0: {0: (b"done\npartial", 1.0, 2.0, "h0")}}, ended=False)
    job = logview.scan(str(tmp_path))
    read = {}
    assert [x.text for x in logview.merged(job.logs, read=read)] == [b"done"]
    assert read == {str(tmp_path / "worker_0.log"): 5}
    assert [x.text for x in logview.merged(job.logs)] == [b"done", b"partial"]


def _logs_cli(*args):
    return subprocess.run([sys.executable, "-m", "mpilaunch", "logs", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


def test_the_command_across_attempts_by_host_and_attempt(tmp_path):
    _write_job(tmp_path, {0: {0: (b"a0 r0\n", 1.0, 2.0, "h0"), 1: (b"a0 r1\n", 1.0, 2.0, "h1")},
                          1: {0: (b"a1 r0\n", 5.0, 6.0, "h1"), 1: (b"a1 r1 boom\n", 5.0, 6.0, "h0")}})
    p = _logs_cli(str(tmp_path))
    assert (p.returncode, p.stderr) == (0, "")
    assert p.stdout == ("==> attempt 0 <==\n[rank0] a0 r0\n[rank1] a0 r1\n"
                        "==> attempt 1 <==\n[rank0] a1 r0\n[rank1] a1 r1 boom\n")
    assert _logs_cli(str(tmp_path), "--host", "h0").stdout == \
        "==> attempt 0 <==\n[rank0] a0 r0\n==> attempt 1 <==\n[rank1] a1 r1 boom\n"
    assert _logs_cli(str(tmp_path), "--attempt", "1", "--grep", "bo+m").stdout == "[rank1] a1 r1 boom\n"


@pytest.mark.parametrize("args, message", [
    (["{job}", "--host", "h9"], "--host='h9': no rank of this job ran there (hosts: h0)"),
    (["{job}", "--attempt", "3"], "--attempt=3: this job has no such attempt (attempts: 0)"),
    (["{job}", "--tail", "-2"], "--tail='-2': not a whole number"),
    (["{job}", "--grep", "["], "--grep='[': not a regular expression: unterminated character set at position 0"),
    (["{job}", "--bogus"], "unrecognized arguments: --bogus"),
    (["{empty}"], "LOG_DIR '{empty}': not an mpilaunch job's log dir (no events.jsonl, no worker_<rank>.log); "
                  "give the --log_dir of a job"),
    (["{empty}/gone"], "LOG_DIR '{empty}/gone': no such directory; give the --log_dir of a job"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    job, empty = tmp_path / "job", tmp_path / "empty"
    job.mkdir()
    empty.mkdir()
    _write_job(job, {0: {0: (b"x\n", 1.0, 2.0, "h0")}})
    fill = {"job": str(job), "empty": str(empty)}
    p = _logs_cli(*[a.format(**fill) for a in args])
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"mpilaunch: error: {message.format(**fill)}\n")


def test_too_low_an_open_file_limit_for_the_logs_is_one_line(tmp_path):
    import resource

    _write_job(tmp_path, {0: {r: (b"x\n", 1.0, 2.0, "h0") for r in range(10)}})

    def low():
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
    p = subprocess.run([sys.executable, "-m", "mpilaunch", "logs", str(tmp_path)], capture_output=True, text=True,
                       cwd=REPO, timeout=60, preexec_fn=low)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == ("mpilaunch: error: ulimit -n 40 (hard 40): too low to read 10 logs side by side; "
                        "raise it to 42, or choose fewer with --rank, --host or --attempt\n")
    p = subprocess.run([sys.executable, "-m", "mpilaunch", "logs", str(tmp_path), "--rank", "0-3"], capture_output=True,
                       text=True, cwd=REPO, timeout=60, preexec_fn=low)
    assert (p.returncode, p.stdout, p.stderr) == (0, "".join(f"[rank{r}] x\n" for r in range(4)), "")


def _times(*records):
    """A times index as the rank side's relay writes it (mpilaunch/rank/relay.py)."""
    return b"".join(o.to_bytes(8, "little") + ns.to_bytes(8, "little") for o, ns in records)


def test_a_times_index_gives_each_line_its_chunks_time():
    t = logview.parse_times(_times((0, 1_000_000_000), (10, 2_500_000_000), (30, 3_000_000_000)) + b"part", 40)
    assert [list(x) for x in t] == [[0, 10, 30], [1_000_000_000, 2_500_000_000, 3_000_000_000]]
    assert [logview.line_time(t, o) for o in (0, 9, 10, 29, 30, 39)] == [1.0, 1.0, 2.5, 2.5, 3.0, 3.0]


@pytest.mark.parametrize("data, size", [
    (b"", 10),                                             # none (an empty or absent index)
    (_times((4, 1)), 10),                                  # not from the log's start
    (_times((0, 1), (20, 2)), 10),                         # past the end: another log's
    (_times((0, 1), (8, 2), (5, 3)), 10),                  # offsets going back
])
def test_an_index_that_does_not_fit_the_log_is_not_used(data, size):
    assert logview.parse_times(data, size) is None


def test_the_index_orders_ranks_by_real_time_and_others_are_estimated(tmp_path):
    # estimated, rank 0's "late" (at the end of a log that ends at 110) would come after rank 1's
    # "early" (101); rank 0's index says it was read at 102.5, before rank 1's "later" at 103
    _write_job(tmp_path, {0: {0: (b"a\nlate\n", 100.0, 110.0, "h0"),
                              1: (b"early\nlater\n", 101.0, 105.0, "h1"),
                              2: (b"no index\n", 104.0, 104.0, "h1")}})
    (tmp_path / ".worker_0.log.times").write_bytes(_times((0, 100_000_000_000), (2, 102_500_000_000)))
    (tmp_path / ".worker_1.log.times").write_bytes(_times((0, 101_000_000_000), (6, 103_000_000_000)))
    job = logview.scan(str(tmp_path))
    assert [(x.t, x.rank, x.text) for x in logview.merged(job.logs)] == [
        (100.0, 0, b"a"), (101.0, 1, b"early"), (102.5, 0, b"late"), (103.0, 1, b"later"),
        (104.0, 2, b"no index")]
    assert [x.text for x in logview.merged(job.logs, since=102.6)] == [b"later", b"no index"]
    assert logview.times_path(str(tmp_path / "worker_0.log")) == str(tmp_path / ".worker_0.log.times")


def test_the_relay_and_the_viewer_name_the_index_alike(tmp_path):
    from mpilaunch.rank import relay

    path = str(tmp_path / "attempt2" / "w_3.log")
    assert relay.times_path(path) == logview.times_path(path) == str(tmp_path / "attempt2" / ".w_3.log.times")
