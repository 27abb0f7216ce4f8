"""2. MindSpore cluster start: 2 workers whose script calls ``init()`` and exits
(``examples/ms_train.py --init-only``), launcher spawn -> launcher exit.

Variants, interleaved (each job gets its own master port from 48100-48189 and log dir):

* ``msrun`` (baseline): ``msrun --worker_num=2 --local_worker_num=2 --master_port=P
  --log_dir=D --join=True ms_train.py --init-only`` (``msrun_baseline.msrun_argv``);
* ``mpilaunch``: ``<ms-venv>/bin/python -m mpilaunch --python <ms-venv>/bin/python -np 2
  --master_port P --log_dir=D ms_train.py --init-only`` (its mpirun: the Open MPI 5 of the
  venv, found next to the interpreter);
* ``hand-written env launch``: ``bench/workloads/hand_launch.py`` (3 Popens with MS_* env).

All three are timed by ``msrun_baseline.time_init_only`` (psutil tracks each process's exit;
a run counts only with rc 0 and ``MS_INIT_OK`` in both worker logs). The profile reads
MindSpore's own log timestamps to show where the time goes.
"""
from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from typing import Dict, List, Optional

import common as C

TARGET = 0.70   # x msrun (was 0.6 in the first round)
SCRIPT = os.path.join(C.EXAMPLES, "ms_train.py")
HAND = os.path.join(C.WORKLOADS, "hand_launch.py")
V_MSRUN = "msrun"
V_ML = "mpilaunch"
V_HAND = "hand-written env launch (3 Popens)"

_TS = re.compile(r"(\d{4}-\d{2}-\d{2}-\d{2}:\d{2}:\d{2})\.(\d{3})\.(\d{3})")


def ml_argv(port: int, log_dir: str, script_args: List[str]) -> List[str]:
    return [C.MS_PY, "-m", "mpilaunch", "--python", C.MS_PY, "-np", "2", "--master_port", str(port),
            f"--log_dir={log_dir}", SCRIPT, *script_args]


def hand_argv(port: int, log_dir: str, script_args: List[str]) -> List[str]:
    return [C.MS_PY, HAND, "--python", C.MS_PY, "--port", str(port), "--workers", "2",
            f"--log_dir={log_dir}", "--", SCRIPT, *script_args]


def msrun_argv(port: int, log_dir: str, script_args: List[str]) -> List[str]:
    import msrun_baseline as MB
    return MB.msrun_argv(C.MSRUN, 2, port=port, log_dir=log_dir, script=SCRIPT, script_args=script_args)


def ms_env() -> Dict[str, str]:
    import msrun_baseline as MB
    env = MB.msrun_env(C.MSRUN, C.base_env())
    env.pop("PYTHONPATH", None)
    # MindSpore's own bytecode is in its install's __pycache__: a PYTHONPYCACHEPREFIX (set by
    # run.py for the other sections) would make every process recompile mindspore from source.
    env.pop("PYTHONPYCACHEPREFIX", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"   # never write into the venv or the source tree
    return env


def log_events(log_dir: str, t0: float) -> Dict[str, Optional[float]]:
    """MindSpore's own milestones, seconds after the launcher was spawned (wall clock)."""
    def times(path, needle):
        out = []
        try:
            with open(path, errors="replace") as fh:
                for line in fh:
                    if needle in line:
                        m = _TS.search(line)
                        if m:
                            t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d-%H:%M:%S"))
                            out.append(t + int(m.group(2)) / 1e3 + int(m.group(3)) / 1e6 - t0)
        except OSError:
            pass
        return out
    sched = os.path.join(log_dir, "scheduler.log")
    workers = [os.path.join(log_dir, f"worker_{i}.log") for i in range(2)]
    ev = {}
    first = lambda xs: min(xs) if xs else None
    last = lambda xs: max(xs) if xs else None
    ev["scheduler listening"] = first(times(sched, "Finish to Initialize MetaServerNode"))
    ev["both workers registered"] = last(times(sched, "is registered successfully"))
    ev["scheduler: cluster built"] = first(times(sched, "Cluster is successfully initialized"))
    w_ok = [first(times(w, "Cluster is successfully initialized")) for w in workers]
    ev["last worker: cluster built"] = None if None in w_ok else max(w_ok)
    ev["both workers unregistered"] = last(times(sched, "has unregistered"))
    return ev


def run(opts, log) -> dict:
    if not C.ms_available():
        return skipped(f"MindSpore venv {C.MS_VENV} (python, msrun) not found")
    import msrun_baseline as MB

    ports = C.PortPool()
    env = ms_env()
    work = tempfile.mkdtemp(prefix="bench-msstart-")
    runs, warmup = opts.runs, (0 if opts.smoke else 1)
    counter = {"i": 0}

    def one(kind):
        def fn(rnd):
            counter["i"] += 1
            d = os.path.join(work, f"{counter['i']:03d}-{kind.split()[0]}")
            os.makedirs(d)
            logs = os.path.join(d, "logs")
            port = ports.take()
            argv = {V_MSRUN: msrun_argv, V_ML: ml_argv, V_HAND: hand_argv}[kind](port, logs, ["--init-only"])
            t0 = time.time()
            r = MB.time_init_only(argv, env=env, cwd=d, console=os.path.join(d, "console.out"), timeout=300)
            res = C.RunResult(r["wall"], r["rc"], timed_out=r["timed_out"])
            if r["rc"] == 0 and r["init_ok"] != 2:
                res.rc = -996
                res.extra["error"] = f"MS_INIT_OK in {r['init_ok']}/2 worker logs"
            res.extra.update(exited=r["exited"], events=log_events(logs, t0), port=port,
                             argv=argv)
            return res
        return fn

    variants = [(V_MSRUN, one(V_MSRUN)), (V_ML, one(V_ML)), (V_HAND, one(V_HAND))]
    if opts.smoke:
        variants = [(V_ML, one(V_ML))]
    log(f"[msstart] MindSpore init-only, 2 workers ({'smoke: mpilaunch only' if opts.smoke else 'msrun, mpilaunch, hand'})")
    res = C.interleave(variants, runs, warmup, log)
    __import__("shutil").rmtree(work, ignore_errors=True)
    return summarize(res, opts)


def skipped(why: str) -> dict:
    return {"key": "msstart", "title": "2. MindSpore cluster start (2 workers, init() only)",
            "method": [], "tables": [], "verdicts": [
                {"figure": "MindSpore cluster start", "value": "skipped", "target": f"<= {TARGET}x msrun",
                 "met": None}], "chart": None, "profile": [], "notes": [f"Skipped: {why}."], "raw": {}}


def _phases(r: C.RunResult) -> Dict[str, Optional[float]]:
    ev = dict(r.extra.get("events", {}))
    ex = r.extra.get("exited", {})

    def gone(prefix):
        ts = [t for k, t in ex.items() if k.startswith(prefix)]
        return max(ts) if ts else None
    ev["workers exited"] = gone("worker_")
    ev["scheduler exited"] = gone("scheduler")
    ev["launcher exited"] = r.wall
    return ev


PHASES = ["scheduler listening", "both workers registered", "scheduler: cluster built",
          "last worker: cluster built", "both workers unregistered", "workers exited",
          "scheduler exited", "launcher exited"]


def summarize(res, opts) -> dict:
    order = [v for v in (V_MSRUN, V_ML, V_HAND) if v in res]
    base = C.stats(C.ok_values(res[V_MSRUN])) if V_MSRUN in res else {"n": 0}
    rows, verdicts = [], []
    series = {v: [] for v in order}
    for v in order:
        s = C.stats(C.ok_values(res[v]))
        r = C.ratio(s, base) if v != V_MSRUN else None
        rows.append([v, s.get("n", 0), res[v]["failed"], *_msm(s), "—" if r is None else f"{r:.2f}x"])
        series[v].append(_tri(s))
    s_ml = C.stats(C.ok_values(res[V_ML]))
    if base.get("n") and s_ml.get("n"):
        r = s_ml["median"] / base["median"]
        verdicts.append({"figure": "MindSpore cluster start (2 workers, init only): mpilaunch / msrun",
                         "value": f"{r:.2f}x ({s_ml['median']:.2f} s vs {base['median']:.2f} s)",
                         "target": f"<= {TARGET}x", "met": r <= TARGET})
    s_hand = C.stats(C.ok_values(res[V_HAND])) if V_HAND in res else {"n": 0}
    if s_hand.get("n") and s_ml.get("n"):
        r = s_ml["median"] / s_hand["median"]
        verdicts.append({"figure": "MindSpore cluster start: mpilaunch / hand-written 3-process launch",
                         "value": f"{r:.2f}x ({s_ml['median']:.2f} s vs {s_hand['median']:.2f} s)",
                         "target": "<= 1.0x (never slower)", "met": r <= 1.0})
    if not (base.get("n") and s_ml.get("n")):
        verdicts.append({"figure": "MindSpore cluster start: mpilaunch / msrun",
                         "value": (f"mpilaunch {s_ml['median']:.2f} s; msrun not run (smoke)" if s_ml.get("n")
                                   else "no successful run"),
                         "target": f"<= {TARGET}x", "met": None})
    # profile: median time of each milestone per launcher
    prof_rows = []
    for ph in PHASES:
        cells = []
        for v in order:
            xs = [_phases(r).get(ph) for r in res[v]["runs"] if r.ok]
            xs = [x for x in xs if x is not None]
            cells.append(f"{statistics.median(xs):.2f}" if xs else "—")
        prof_rows.append([ph, *cells])
    profile = [
        "Milestones, median seconds after the launcher was spawned (MindSpore's own log timestamps; "
        "process exits seen by psutil polling every 50 ms):", "",
        "| milestone | " + " | ".join(order) + " |",
        "|---|" + "---|" * len(order)] + ["| " + " | ".join(row) + " |" for row in prof_rows] + [""]
    return {
        "key": "msstart",
        "title": "2. MindSpore cluster start (2 workers, init() only)",
        "method": [
            "Wall time from spawning the launcher to its exit; a run counts if the launcher exits 0 and both worker "
            "logs contain `MS_INIT_OK` (`msrun_baseline.time_init_only`, which also records when each process went). "
            "Every job gets its own master port (48100-48189) and log directory; environment without MS_* "
            "variables, MindSpore venv first on PATH.",
            f"msrun: `{C.MSRUN} --worker_num=2 --local_worker_num=2 --master_port=P --log_dir=D --join=True "
            "examples/ms_train.py --init-only`. mpilaunch: `" + " ".join(
                ml_argv(0, "D", ["--init-only"])).replace("--master_port 0", "--master_port P") + "`. "
            "Hand-written: `bench/workloads/hand_launch.py` (scheduler + 2 workers as plain Popens with "
            "MS_ROLE, MS_SCHED_HOST, MS_SCHED_PORT, MS_WORKER_NUM, MS_NODE_ID).",
            f"Interleaved rounds (msrun, mpilaunch, hand); {'smoke: mpilaunch only, no warm-up' if opts.smoke else '1 warm-up round'}; "
            f"{opts.runs} measured.",
        ],
        "tables": [{"title": "Wall time (s)",
                    "columns": ["launcher", "n", "failed", "median", "min", "max", "vs msrun"],
                    "rows": rows}],
        "verdicts": verdicts,
        "chart": {"title": "MindSpore init-only start, 2 workers", "unit": "s", "groups": ["init-only"],
                  "series": series},
        "profile": profile,
        "raw": {v: [_phases(r) for r in res[v]["runs"] if r.ok] for v in order},
    }


def _msm(s):
    if not s.get("n"):
        return ["—", "—", "—"]
    return [f"{s['median']:.2f}", f"{s['min']:.2f}", f"{s['max']:.2f}"]


def _tri(s):
    return (s["median"], s["min"], s["max"]) if s.get("n") else None
