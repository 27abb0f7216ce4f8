"""What a failure at scale prints (mpilaunch/output/summary.py, relays.py): the root cause first, then
counts instead of one entry per rank, the ranks that failed on their own one by one but capped,
every rank's status in a file next to the logs; the hosts where no daemon started with the
check that fails there; Open MPI's harmless setpgid race lines kept off the console."""
import io
import os
import threading
import time

from mpilaunch.supervise import relays
from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.check.results import FAIL, CheckResult
from mpilaunch.config.mpi import OMPI5, MpiInfo
from mpilaunch.output.outcome import failures
from mpilaunch.output.summary import (MAX_LISTED, RANKS_FILE, Collector, Event, render_summary,
                               write_ranks_file)

OMPI = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))


def ev(rank, code=None, sig=None, t=1.0, cause="self", role="worker", log=None):
    return Event(rank, f"host{rank}", role, "exit", code, sig, cause, log, [], t, None)


def job(n, failed=(), finished=(), log_dir="/logs"):
    """Rank 5 fails first; ``failed`` fail on their own later, ``finished`` had exited 0, the
    rest were stopped by the teardown; rank 0 also ran a scheduler copy."""
    c = Collector(OMPI)
    c.feed_status(ev(5, code=3, t=1.0, log=f"{log_dir}/worker_5.log"))
    for r in range(n):
        if r == 5:
            continue
        if r in failed:
            c.feed_status(ev(r, code=1, t=2.0 + r, log=f"{log_dir}/worker_{r}.log"))
        elif r in finished:
            c.feed_status(ev(r, code=0, t=0.5, log=f"{log_dir}/worker_{r}.log"))
        else:
            c.feed_status(ev(r, sig=15, t=3.0, cause="terminated", log=f"{log_dir}/worker_{r}.log"))
    c.feed_status(ev(0, sig=15, t=3.0, cause="terminated", role="scheduler"))
    return c


def test_32_ranks_read_as_a_root_cause_and_counts():
    text = render_summary(job(32), 3, ranks_file="/logs/ranks.txt")
    lines = text.splitlines()
    assert lines[0] == "mpilaunch: job failed (exit status 3)"
    assert lines[1] == "  root cause: rank 5 (worker) on host host5: exit code 3"
    assert "  31 workers on 31 hosts stopped by the teardown" in lines
    assert "  1 scheduler on 1 host stopped by the teardown" in lines
    assert lines[-1] == "  every rank: /logs/ranks.txt"
    assert len(lines) == 6 and "rank 7" not in text


def test_ranks_failing_on_their_own_are_named_but_capped():
    failed = set(range(6, 6 + MAX_LISTED + 4))
    lines = render_summary(job(64, failed=failed, finished={1, 2}), 3).splitlines()
    named = [ln for ln in lines if ln.startswith("  also failed on its own:")]
    assert named[0] == "  also failed on its own: rank 6 (worker) on host host6: exit code 1"
    assert len(named) == MAX_LISTED
    assert "  ... and 4 more failed on their own" in lines
    assert "  2 workers on 2 hosts had finished (exit 0)" in lines
    stopped = 64 - 1 - len(failed) - 2
    assert f"  {stopped} workers on {stopped} hosts stopped by the teardown" in lines


def test_the_ranks_file_lists_every_rank_next_to_the_logs(tmp_path):
    c = job(32, failed={9}, log_dir=str(tmp_path / "logs"))
    path = write_ranks_file(c)
    assert path == str(tmp_path / "logs" / RANKS_FILE)
    rows = open(path).read().splitlines()
    assert len(rows) == 33                       # 32 workers and the scheduler copy
    assert rows[0].startswith("rank 0 (worker) on host host0: exit killed by signal 15")
    assert "rank 5 (worker) on host host5: exit exit code 3, failed on its own" in rows[6]
    assert any(r.startswith("rank 9 (worker)") and "failed on its own" in r for r in rows)
    # one rank, or ranks that named no log: nothing to write
    one = Collector(OMPI)
    one.feed_status(ev(1, code=1, log=str(tmp_path / "one" / "worker_1.log")))
    assert write_ranks_file(one) is None and not (tmp_path / "one").exists()
    c = Collector(OMPI)
    c.feed_status(ev(1, code=1))
    c.feed_status(ev(2, sig=15, cause="terminated"))
    assert write_ranks_file(c) is None


def test_hosts_where_no_daemon_started_are_named_with_the_fix():
    c = Collector(OMPI)
    c.not_started = [CheckResult(f"10.0.0.{i}", f"10.0.0.{i}", "ssh-port", FAIL,
                                 "ssh port 22 closed — is sshd running there? (SSHD_PORT/--ssh-port)")
                     for i in range(1, MAX_LISTED + 3)]
    text = render_summary(c, 255)
    assert text.splitlines()[1].startswith(f"  root cause: mpirun could not start on {MAX_LISTED + 2} "
                                           "host(s): 10.0.0.1, 10.0.0.2,")
    assert "    10.0.0.1: ssh port 22 closed — is sshd running there? (SSHD_PORT/--ssh-port)\n" in text
    assert "    ... and 2 more\n" in text
    assert failures(c, 255)[0].cause == "could not start on host 10.0.0.1"


def test_many_lost_hosts_are_capped():
    c = Collector(OMPI)
    c.unreachable = [f"h{i}" for i in range(40)]
    text = render_summary(c, 255)
    assert "  root cause: host h0 lost:" in text
    assert f"  also lost: {', '.join(f'h{i}' for i in range(1, 1 + MAX_LISTED))} and {39 - MAX_LISTED} more\n" in text


def test_the_setpgid_race_lines_do_not_reach_the_console():
    r, w = os.pipe()
    lines = [b"[mls-host1:05591] plm:ssh: Warning: setpgid(5613,5613) failed in parent with "
             b"errno=Permission denied(13)\n",
             b"[h:1] plm:rsh: Warning: setpgid(7,7) failed in parent with errno=Permission denied(13)\n",
             b"[h:1] plm:ssh: Warning: setpgid(7,7) failed in parent with errno=No such process(3)\n",
             b"ssh: connect to host 10.0.0.5 port 22: Connection refused\n"]
    with os.fdopen(w, "wb") as fh:
        fh.writelines(lines)
    got = io.BytesIO()
    collector = Collector(OMPI)
    relay = relays.ErrRelay(os.fdopen(r, "rb"), collector, lambda e: None)
    orig = relays.Sink.write
    relays.Sink.write = lambda self, data: got.write(data)
    try:
        t = threading.Thread(target=relay.run)
        t.start()
        t.join(10)
    finally:
        relays.Sink.write = orig
    assert got.getvalue() == lines[2] + lines[3]    # another errno is not the race: shown
    assert "Permission denied(13)" not in collector.text


def _read_until(fd, text, timeout=10):
    """What the line drew on ``fd`` until ``text`` appears in it (waits for the drawing thread,
    not for a time)."""
    got = ""
    deadline = time.monotonic() + timeout
    while text not in got:
        assert time.monotonic() < deadline, got
        got += _read_all(fd).decode()
        time.sleep(0.01)
    return got


def _read_all(fd):
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_the_startup_line_counts_ranks_and_names_a_host_still_awaited():
    import time

    r, w = os.pipe()
    hosts = ["h1", "h2", "h3", "h4"]
    line = relays.StartupLine(8, hosts, owners=[h for h in hosts for _ in range(2)], fd=w,
                              after=0.2, every=0.05)
    line.rank_up(0, "host-a")
    drawn = _read_until(r, "1/8 ranks up")
    assert drawn.startswith("\rmpilaunch: starting: 1/8 ranks up, 1/4 hosts, waiting for h2 and 2 more (")
    assert float(drawn.split("(")[1].split(" s)")[0]) >= 0.2 - 0.05    # nothing before the delay
    line.rank_up(1, "host-a")
    line.rank_up(2, "host-b")
    drawn = _read_until(r, "3/8 ranks up")
    assert "\rmpilaunch: starting: 3/8 ranks up, 2/4 hosts, waiting for h3 and 1 more (" in drawn
    for rank in range(3, 8):
        line.rank_up(rank, "x")
    assert line.done.is_set()
    assert _read_all(r).endswith(b"\r\x1b[K")          # erased once every rank is up
    time.sleep(0.15)
    assert _read_all(r) == b""                         # and never drawn again
    os.close(r)
    os.close(w)


def test_a_quick_launch_or_a_pipe_shows_no_startup_line():
    import time
    from collections import namedtuple

    r, w = os.pipe()
    line = relays.StartupLine(2, ["a"], fd=w, after=0.3)
    line.rank_up(0, "a")
    line.finish()                                      # the job printed something, or ended
    time.sleep(0.4)
    assert _read_all(r) == b""
    Plan = namedtuple("Plan", "np hosts args")
    assert relays.startup_line(Plan(2, (), ()), fd=w) is None      # not a terminal
    os.close(r)
    os.close(w)
