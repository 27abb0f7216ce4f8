"""In-place restarts onto fresh workers meet a rendezvous store that is already up (rank 0's
store holder, mpilaunch/rank/inplace/hold.py): the restart word says so only once the holder
listens on the attempt's port, and every restarted worker is then its client
(``TORCHELASTIC_USE_AGENT_STORE=True``, as under torchrun's agent), so no rank waits out
TCPStore's retry back-off. A dead holder changes nothing but that: the next restart goes as
without one (rank 0's worker makes its store). Real mpirun, real torch (gloo, CPU); fresh
workers only (``MPILAUNCH_SPARE_PRELOAD`` empty: what a busy machine gets). Asserted from the
workers (the flag, and which process listens on their store's port) and from events.jsonl."""
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import OMPI5
from helpers.procs import alive, kill_leftovers, watch_to_end

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")

# Attempt 0: rank 0 waits for the holder to be up (its process name says so), rank 1 then
# fails. Attempt 1 (held): each rank records its flag and who listens on its store's port,
# trains a step, then rank 0 kills the holder and rank 1 fails again. Attempt 2 (no holder):
# the same records, a step, success.
TRAIN = r'''
import json, os, signal, sys, time
import psutil
import torch, torch.distributed as dist
out = sys.argv[1]
rank, k = int(os.environ["RANK"]), int(os.environ["MPILAUNCH_RESTART_COUNT"])
port = int(os.environ["MASTER_PORT"])

def holder():
    for c in psutil.Process(os.getppid()).children():
        try:
            if c.name() == "mpilaunch-store":
                return c
        except psutil.Error:
            pass

def listener():
    return [c.pid for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]

def wait_file(name):
    while not os.path.exists(os.path.join(out, name)):
        time.sleep(0.05)

def put(name, value):
    with open(os.path.join(out, name + ".tmp"), "w") as fh:
        json.dump(value, fh)
    os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

seen = {"flag": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"), "pid": os.getpid(),
        "port": port, "before": listener() if rank == 0 else None}
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
seen["sum"] = t.item()
if rank == 0:
    seen["after"] = listener()
    h = holder()
    seen["holder"] = h.pid if h else None
put("seen_%d_%d" % (k, rank), seen)
if k == 0 and rank == 0:
    while holder() is None:     # the holder is up: the restart it serves can come
        time.sleep(0.05)
    put("up", holder().pid)
elif k == 1 and rank == 0:
    h = holder()
    h.kill()
    h.wait(30)
    put("killed", h.pid)
if k < 2 and rank == 1:
    wait_file("up" if k == 0 else "killed")
    sys.exit(1)
if k < 2:
    time.sleep(600)     # torn down by the restart
dist.destroy_process_group()
'''


def _job(tmp_path, text, restarts, **env):
    """A 2-rank job of script ``text`` (its output dir its argument) with ``--max_restarts
    restarts``, run to its end: it succeeded and left no process behind. -> (stderr, out, logs)."""
    out, logs = tmp_path / "out", tmp_path / "logs"
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(text)
    argv = mpilaunch_argv("--mpirun", OMPI5.mpirun, "-np", "2", "--no-scheduler", "--master_port",
                          "0", "--log_dir", str(logs), "--max_restarts", str(restarts), str(script),
                          str(out))
    proc = subprocess.Popen(argv, env=clean_env(**env), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rc, _, err, kids = watch_to_end(proc, 240)
    left = alive(kids)
    kill_leftovers(left)
    assert left == [], f"outlived the job: {left}"
    assert rc == 0, err
    return err, out, logs


def test_a_fresh_restart_meets_the_held_store_and_a_dead_holder_changes_nothing(tmp_path):
    err, out, logs = _job(tmp_path, TRAIN, 2, MPILAUNCH_SPARE_PRELOAD="", MPILAUNCH_DEBUG_SPARE=1)
    assert "attempt 2: succeeded" in err, err
    holder = json.loads((out / "up").read_text())
    seen = {(k, r): json.loads((out / f"seen_{k}_{r}").read_text())
            for k in range(3) for r in range(2)}
    assert all(s["sum"] == 2.0 for s in seen.values())
    # attempt 0: no holder yet; rank 0's worker is its store's server
    assert [seen[0, r]["flag"] for r in (0, 1)] == [None, None]
    assert seen[0, 0]["after"] == [seen[0, 0]["pid"]]
    # attempt 1: held. Every worker a client; the port already served by the holder before
    # rank 0's worker got to init_process_group, and by it alone after
    assert [seen[1, r]["flag"] for r in (0, 1)] == ["True", "True"]
    assert seen[1, 0]["before"] == [holder] and seen[1, 0]["after"] == [holder]
    assert seen[1, 0]["holder"] == holder
    assert f"mpilaunch.rank: rank 0: attempt 1's store held by pid {holder} on port " \
           f"{seen[1, 0]['port']}" in err, err
    # attempt 2: the holder was killed: the word was not "held", rank 0's worker served its
    # own store as without a holder, on a port the holder was never given
    assert [seen[2, r]["flag"] for r in (0, 1)] == [None, None]
    assert seen[2, 0]["before"] == [] and seen[2, 0]["after"] == [seen[2, 0]["pid"]]
    assert seen[2, 0]["holder"] is None
    assert "mpilaunch.rank: rank 0: attempt 2's store not held: " in err, err
    records = [json.loads(ln) for ln in (logs / "events.jsonl").read_text().splitlines()]
    held = [r for r in records if r.get("event") == "store-held"]
    assert sorted(r["rank"] for r in held) == [0, 1], held
    assert [r["pid"] for r in held if r["rank"] == 0] == [holder]
    # each rank told of each restart, with the attempt it restarts into (docs/EVENTS.md)
    told = sorted((r["code"], r["rank"]) for r in records if r.get("event") == "restart")
    assert told == [(1, 0), (1, 1), (2, 0), (2, 1)], told


# Rank 1 probes rank 0's store port at its first line, before it imports anything, while rank 0's
# script waits for that probe before its own init_process_group: whoever listens then, it is
# not rank 0's script. Rank 0 records who listened at its first line (which process) and
# whether the environment handed to it still names the port's descriptor.
FIRST = r'''
import json, os, socket, sys, time
out = sys.argv[1]
rank = int(os.environ["RANK"])
port = int(os.environ["MASTER_PORT"])

def put(name, value):
    with open(os.path.join(out, name + ".tmp"), "w") as fh:
        json.dump(value, fh)
    os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))

if rank == 1:
    try:
        socket.create_connection((os.environ["MASTER_ADDR"], port), timeout=10).close()
        put("probe", "accepted")
    except OSError as exc:
        put("probe", repr(exc))
else:
    import psutil
    put("first", {"pid": os.getpid(), "fd_var": "MPILAUNCH_STORE_FD" in os.environ,
                  "listeners": [c.pid for c in psutil.net_connections("tcp")
                                if c.status == psutil.CONN_LISTEN and c.laddr.port == port]})
    while not os.path.exists(os.path.join(out, "probe")):
        time.sleep(0.05)
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
put("sum_%d" % rank, t.item())
dist.destroy_process_group()
'''


def test_rank_0s_port_listens_before_its_worker_has_torch(tmp_path):
    # the first attempt of an in-place job (spares on, the default): rank 0's adapter binds the
    # port before its worker starts and the worker serves it before its script runs
    # (rank/inplace/adopt.py first_store), so the other ranks are never refused by it
    _, out, _ = _job(tmp_path, FIRST, 1)
    assert json.loads((out / "probe").read_text()) == "accepted"
    first = json.loads((out / "first").read_text())
    # the worker's own process, and it alone (the adapter's copy closed), before its
    # script's init_process_group; the descriptor's variable is not the script's to see
    assert first["listeners"] == [first["pid"]], first
    assert first["fd_var"] is False
    assert [json.loads((out / f"sum_{r}").read_text()) for r in (0, 1)] == [2.0, 2.0]
