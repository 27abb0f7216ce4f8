"""3. Failure teardown: 2-worker MindSpore training (``ms_train.py --steps 60
--sleep-per-step 1``); when worker rank 1 has written step 5, it is SIGKILLed; measured:
kill -> the launcher has exited and none of the job's processes (snapshotted just before the
kill: scheduler, workers, adapters, mpirun, msrun's ``tail -f``) is left.

Both launchers are driven by ``msrun_baseline.time_kill_teardown`` (psutil snapshot of the
launcher's descendants, victim = the process with ``MS_ROLE=MS_WORKER MS_NODE_ID=1``).
"""
from __future__ import annotations

import os
import statistics
import tempfile

import bench_msstart as S
import common as C

TARGET_S = 3.0
TARGET_X = 10.0
KILL_AT = 5
V_MSRUN = "msrun"
V_ML = "mpilaunch"


def run(opts, log) -> dict:
    if not C.ms_available():
        return skipped(f"MindSpore venv {C.MS_VENV} (python, msrun) not found")
    import msrun_baseline as MB

    ports = C.PortPool(range(C.MS_PORTS.stop - 1, C.MS_PORTS.start - 1, -1))  # from the top: no clash with msstart
    env = S.ms_env()
    work = tempfile.mkdtemp(prefix="bench-teardown-")
    runs, warmup = opts.runs, (0 if opts.smoke else 1)
    kill_at = 1 if opts.smoke else KILL_AT
    steps = 20 if opts.smoke else 60
    counter = {"i": 0}

    def one(kind):
        def fn(rnd):
            counter["i"] += 1
            d = os.path.join(work, f"{counter['i']:03d}-{kind}")
            os.makedirs(d)
            out = os.path.join(d, "out")
            port = ports.take()
            sargs = ["--steps", str(steps), "--sleep-per-step", "1", "--out", out]
            argv = (S.msrun_argv if kind == V_MSRUN else S.ml_argv)(port, os.path.join(d, "logs"), sargs)
            r = MB.time_kill_teardown(argv, out, kill_rank=1, kill_at_step=kill_at, env=env, cwd=d,
                                      timeout=300, console=os.path.join(d, "console.out"))
            t = r.get("teardown")
            res = C.RunResult(t if t is not None else float("nan"), 0 if t is not None else None,
                              timed_out=r.get("timed_out", False))
            res.extra.update(launcher_rc=r.get("rc"), gone=r.get("gone", {}),
                             launcher_exit=r.get("msrun_exit_after_kill"), leftover=r.get("leftover", []),
                             start_to_kill=r.get("start_to_kill"), processes=r.get("processes", []), port=port)
            if r.get("leftover"):
                res.rc = -995
                res.extra["error"] = f"left over: {r['leftover']}"
            return res
        return fn

    variants = [(V_MSRUN, one(V_MSRUN)), (V_ML, one(V_ML))]
    if opts.smoke:
        variants = [(V_ML, one(V_ML))]
    log(f"[teardown] SIGKILL of worker 1 at step {kill_at} ({'smoke: mpilaunch only' if opts.smoke else 'msrun, mpilaunch'})")
    res = C.interleave(variants, runs, warmup, log)
    __import__("shutil").rmtree(work, ignore_errors=True)
    return summarize(res, opts, kill_at)


def skipped(why):
    return {"key": "teardown", "title": "3. Failure teardown (SIGKILL of one of 2 MindSpore workers)",
            "method": [], "tables": [], "verdicts": [
                {"figure": "failure teardown", "value": "skipped", "target": f"<= {TARGET_S} s and >= {TARGET_X}x faster than msrun",
                 "met": None}], "chart": None, "profile": [], "notes": [f"Skipped: {why}."], "raw": {}}


def summarize(res, opts, kill_at) -> dict:
    order = [v for v in (V_MSRUN, V_ML) if v in res]
    rows, verdicts = [], []
    series = {v: [] for v in order}
    stats = {v: C.stats(C.ok_values(res[v])) for v in order}
    base = stats.get(V_MSRUN, {"n": 0})
    for v in order:
        s = stats[v]
        rcs = sorted({str(r.extra.get("launcher_rc")) for r in res[v]["runs"]})
        le = C.stats([r.extra["launcher_exit"] for r in res[v]["runs"] if r.ok and r.extra.get("launcher_exit") is not None])
        speed = "—" if v == V_MSRUN or not base.get("n") or not s.get("n") else f"{base['median'] / s['median']:.1f}x faster"
        rows.append([v, s.get("n", 0), res[v]["failed"], *_msm(s),
                     "—" if not le.get("n") else f"{le['median']:.2f}", ", ".join(rcs), speed])
        series[v].append(_tri(s))
    s_ml = stats.get(V_ML, {"n": 0})
    if s_ml.get("n"):
        verdicts.append({"figure": "failure teardown: mpilaunch, SIGKILL -> everything gone (median)",
                         "value": f"{s_ml['median']:.2f} s (max {s_ml['max']:.2f} s)",
                         "target": f"<= {TARGET_S} s", "met": s_ml["median"] <= TARGET_S})
    if s_ml.get("n") and base.get("n"):
        x = base["median"] / s_ml["median"]
        verdicts.append({"figure": "failure teardown: msrun / mpilaunch",
                         "value": f"{x:.1f}x faster ({base['median']:.2f} s vs {s_ml['median']:.2f} s)",
                         "target": f">= {TARGET_X:.0f}x faster", "met": x >= TARGET_X})
    elif V_MSRUN not in res:
        verdicts.append({"figure": "failure teardown: msrun / mpilaunch", "value": "msrun not run (smoke)",
                         "target": f">= {TARGET_X:.0f}x faster", "met": None})
    # profile: when each process was gone (median seconds after the kill)
    names = []
    for v in order:
        for r in res[v]["runs"]:
            for k in r.extra.get("gone", {}):
                base_name = k
                if base_name not in names:
                    names.append(base_name)
    prof = ["When each process was seen gone, median seconds after the SIGKILL (psutil, 20 ms polling; "
            "`python` = mpilaunch's rank adapters, several share the name):", "",
            "| process | " + " | ".join(order) + " |", "|---|" + "---|" * len(order)]
    for n in sorted(names):
        cells = []
        for v in order:
            xs = [r.extra["gone"][n] for r in res[v]["runs"] if r.ok and n in r.extra.get("gone", {})]
            cells.append(f"{statistics.median(xs):.2f}" if xs else "—")
        prof.append(f"| {n} | " + " | ".join(cells) + " |")
    prof.append("")
    return {
        "key": "teardown",
        "title": "3. Failure teardown (SIGKILL of one of 2 MindSpore workers)",
        "method": [
            f"`examples/ms_train.py --steps {60 if not opts.smoke else 20} --sleep-per-step 1`, 2 workers. When worker rank 1 "
            f"has written step {kill_at} (`params_rank1.jsonl`), `msrun_baseline.time_kill_teardown` snapshots the "
            "launcher's descendants (psutil), SIGKILLs the process with `MS_ROLE=MS_WORKER MS_NODE_ID=1`, and "
            "measures until the launcher has exited and none of the snapshotted processes is left (zombies count as gone).",
            "msrun and mpilaunch command lines as in section 2, with the training arguments; own master port and log "
            f"dir per job. Interleaved rounds (msrun, mpilaunch); {'smoke: mpilaunch only, no warm-up' if opts.smoke else '1 warm-up round'}; "
            f"{opts.runs} measured.",
        ],
        "tables": [{"title": "Teardown time (s)",
                    "columns": ["launcher", "n", "failed", "median", "min", "max", "launcher exit after kill (median)",
                                "launcher exit codes", "vs msrun"],
                    "rows": rows}],
        "verdicts": verdicts,
        "chart": {"title": "Teardown after SIGKILL of a worker", "unit": "s", "groups": ["SIGKILL worker 1"],
                  "series": series, "log": True},
        "profile": prof,
        "raw": {},
    }


def _msm(s):
    if not s.get("n"):
        return ["—", "—", "—"]
    return [f"{s['median']:.2f}", f"{s['min']:.2f}", f"{s['max']:.2f}"]


def _tri(s):
    return (s["median"], s["min"], s["max"]) if s.get("n") else None
