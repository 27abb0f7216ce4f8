"""Log names, tail selection, status lines, secret masking and the output relay."""
import json
import os
import threading
import time

import pytest

from mpilaunch import contract
from mpilaunch.contract import STATUS_PREFIX as PREFIX
from mpilaunch.errors import UsageError
from mpilaunch.rank import logs
from mpilaunch.rank.status import status_line
from mpilaunch.rank.relay import relay


def test_tail_spec():
    def parse(raw):
        return contract.parse_tail_spec(raw, "--tail-worker-log")   # as options.py calls it
    assert parse("-1") is None
    assert parse("none") == frozenset()
    assert parse("0, 3") == frozenset({0, 3})
    assert logs.is_tailed(None, 5) and not logs.is_tailed(frozenset({1}), 5)
    with pytest.raises(UsageError, match="--tail-worker-log"):
        parse("1,x")


def test_worker_log_name():
    assert logs.worker_log_name(logs.DEFAULT_WORKER_LOG_NAME, 3, "h", "1.2.3.4") == "worker_3.log"
    assert logs.worker_log_name("w_{ip}_{hostname}_{rank}.txt", 3, "h", "1.2.3.4") == \
        "w_1.2.3.4_h_3.txt"
    for bad in ("w_{node}.log", "w_{rank.log", ""):
        with pytest.raises(UsageError, match="--worker-log-name"):
            logs.check_log_name(bad)


def test_mask_secrets():
    env = {"AWS_SECRET_ACCESS_KEY": "s3cr3tvalue", "MY_TOKEN": "tok-123456", "HOME": "/root",
           "SHORT_KEY": "ab"}
    assert contract.mask_lines(["a s3cr3tvalue b tok-123456 /root ab"], env) == [
        f"a {contract.MASK} b {contract.MASK} /root ab"]


def test_read_tail(tmp_path):
    p = tmp_path / "w.log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert logs.read_tail(str(p)) == [f"line {i}" for i in range(90, 100)]
    assert logs.read_tail(str(tmp_path / "missing")) == []
    assert logs.status_tail(str(tmp_path / "missing"), {}) == []


def test_read_tail_is_uncut_and_status_tail_masks_before_cutting(tmp_path):
    secret = "tail-end-secret-0123"
    env = {"MA_API_KEY": "first-secret-line\nsecond-secret-line", "OBS_TOKEN": secret,
           "HOME": "/root"}
    long_line = "x" * 490 + secret                  # the secret straddles the 500-char cut
    p = tmp_path / "w.log"
    p.write_text(f"a first-secret-line\nsecond-secret-line b\n{long_line}\n{'y' * 600}\n/root\n")
    assert logs.read_tail(str(p))[2] == long_line   # whole: masking needs the whole line
    assert logs.status_tail(str(p), env) == [
        "a ****", "**** b", "x" * 490 + "****", "y" * 500, "/root"]


def test_status_line_shape():
    line = status_line(1, "node-b", "worker", "exit", 1, None, "self", "/abs/worker_1.log",
                       ["last", "lines"], t=1764430000.123)
    assert line.startswith(PREFIX) and line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line[len(PREFIX):]) == {
        "v": 1, "rank": 1, "host": "node-b", "role": "worker", "event": "exit", "code": 1,
        "signal": None, "cause": "self", "log": "/abs/worker_1.log", "tail": ["last", "lines"],
        "t": 1764430000.123}


def _drain(fd):
    out = b""
    while True:
        b = os.read(fd, 65536)
        if not b:
            return out
        out += b


def run_relay(chunks, pause=0.0, delay=0.05):
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    log_r, log_w = os.pipe()
    got = {}
    readers = [threading.Thread(target=lambda: got.__setitem__("out", _drain(out_r))),
               threading.Thread(target=lambda: got.__setitem__("log", _drain(log_r)))]
    for t in readers:
        t.start()
    t = threading.Thread(target=relay, args=(r, log_w, b"[rank3] ", out_w, delay))
    t.start()
    for c in chunks:
        os.write(w, c)
        time.sleep(pause)
    os.close(w)
    t.join()
    os.close(out_w)
    for x in readers:
        x.join()
    os.close(out_r)
    os.close(log_r)
    return got["out"], got["log"]


def test_relay_prefixes_whole_lines_and_keeps_the_log_verbatim():
    out, log = run_relay([b"a\nb\n", b"c", b"d\ne\n", b"no newline at end"])
    assert log == b"a\nb\ncd\ne\nno newline at end"
    assert out == b"[rank3] a\n[rank3] b\n[rank3] cd\n[rank3] e\n[rank3] no newline at end\n"


def test_relay_shows_a_quiet_partial_line():
    out, _ = run_relay([b"(Pdb) ", b"p x\n"], pause=0.3)
    assert out == b"[rank3] (Pdb) p x\n"


def test_relay_empty_lines_and_large_volume():
    block = b"y" * 99 + b"\n"
    out, log = run_relay([b"\n\n", block * 30000])
    assert log == b"\n\n" + block * 30000
    assert out == b"[rank3] \n[rank3] \n" + b"[rank3] " .join([b""] + [block] * 30000)


def test_relay_keeps_a_times_index_next_to_a_log_file(tmp_path):
    from mpilaunch.rank.relay import times_path

    log = tmp_path / "worker_3.log"
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    index = tmp_path / ".worker_3.log.times"
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    got = {}
    reader = threading.Thread(target=lambda: got.__setitem__("out", _drain(out_r)))
    reader.start()
    t = threading.Thread(target=relay, args=(r, log_fd, b"[rank3] ", out_w, 0.05))
    before = time.time_ns()
    t.start()
    chunks = [b"first\n", b"second line\n", b"third\n"]
    seen = []
    for c in chunks:
        if seen:    # a chunk read 50 ms or more after the last record gets one of its own
            while not index.exists() or index.stat().st_size < 16 * len(seen):   # the relay makes it
                time.sleep(0.01)
            while time.time_ns() - int.from_bytes(index.read_bytes()[-8:], "little") < 60_000_000:
                time.sleep(0.01)
        seen.append(c)
        os.write(w, c)
    os.close(w)
    t.join()
    os.close(out_w)
    reader.join()
    os.close(out_r)
    after = time.time_ns()
    assert log.read_bytes() == b"".join(chunks)    # the log's bytes are the worker's
    assert times_path(str(log)) == str(index)
    data = index.read_bytes()
    records = [(int.from_bytes(data[i:i + 8], "little"), int.from_bytes(data[i + 8:i + 16], "little"))
               for i in range(0, len(data), 16)]
    assert [o for o, _ in records] == [0, 6, 18]
    assert before <= records[0][1] < records[1][1] - 50_000_000 < records[2][1] - 100_000_000 <= after
