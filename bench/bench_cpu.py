"""6. Per-rank cost: CPU seconds (user + sys) the rank adapter itself spends per rank.

Method (two independent measurements, same runs):

* **Per process** (``bench/hook/sitecustomize.py`` on ``PYTHONPATH``, enabled by
  ``BENCH_PROC_LOG``): every Python process of the job appends, at exit, its own
  ``getrusage(RUSAGE_SELF)`` (all its threads, none of its children). The adapter's
  record is exactly "what the adapter itself spends"; the worker's and the scheduler's are
  separate records. The hook is active in every variant, so its (tiny) cost is on both sides.
* **Whole job** (``os.wait4`` on the launcher): user+sys of the launcher and every process
  it reaped, recursively (mpirun, adapters, workers). ``(job CPU of mpilaunch - job CPU of
  bare mpirun) / N`` is what a user pays per rank, front-end and scheduler included.
  ``mpirun`` itself = job CPU - every Python process's own CPU.

Baseline: bare mpirun (the argv mpilaunch builds, rank command ``python -c pass``).
Variants interleaved: bare, mpilaunch default, mpilaunch --no-scheduler --tail_worker_log none.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import tempfile

import bench_launch as L
import common as C

V_BARE = "bare mpirun, python -c pass"
V_DEFAULT = L.V_DEFAULT
V_LEAN = L.V_LEAN


def _one(argv, env, cwd, proc_log, np):
    try:
        os.unlink(proc_log)
    except FileNotFoundError:
        pass
    env = {**env, "PYTHONPATH": C.HOOK_DIR, "BENCH_PROC_LOG": proc_log}
    r = C.timed_run(argv, env=env, cwd=cwd)
    recs = C.read_proc_log(proc_log)
    cpu = lambda x: x["utime"] + x["stime"]
    adapters = [cpu(x) for x in recs if C.classify(x) == "adapter"]
    front = [cpu(x) for x in recs if C.classify(x) == "front-end"]
    sched = [cpu(x) for x in recs if C.classify(x) == "worker" and x.get("ms_role") == "MS_SCHED"]
    workers = [cpu(x) for x in recs if C.classify(x) == "worker" and x.get("ms_role") != "MS_SCHED"]
    python_total = sum(cpu(x) for x in recs)
    r.extra = {"adapters": adapters, "front": front, "sched": sched, "workers": workers,
               "mpirun": r.cpu - python_total, "records": len(recs)}
    if r.ok and len(workers) != np:
        r.rc = -999  # the accounting is incomplete: do not use this run
        r.extra["error"] = f"{len(workers)} worker records for {np} ranks"
    return r


def run(opts, log) -> dict:
    mpis = [(n, p) for n, p in (("Open MPI 5", C.OMPI5), ("Open MPI 4.1", C.OMPI4)) if C.mpi_available(p)]
    if opts.smoke:
        mpis = mpis[:1]
    np = 2 if opts.smoke else 4
    runs, warmup = opts.runs, (0 if opts.smoke else 1)
    work_root = tempfile.mkdtemp(prefix="bench-cpu-")
    out = {}
    try:
        for mname, mpath in mpis:
            work = os.path.join(work_root, L._slug(mname))
            os.makedirs(work, exist_ok=True)
            cmds = L.commands(mpath, np, work)
            from mpilaunch import plan as planmod  # noqa: F401  (commands() imported it)
            bare = list(cmds[L.V_BARE])
            bare[-1:] = ["-c", "pass"]        # ... python exit_at_once.py -> python -c pass
            argvs = {V_BARE: bare, V_DEFAULT: cmds[V_DEFAULT], V_LEAN: cmds[V_LEAN]}
            plog = os.path.join(work, "proc.jsonl")
            variants = [(v, (lambda rnd, a=argvs[v]: _one(a, cmds["env"], work, plog, np)))
                        for v in (V_BARE, V_DEFAULT, V_LEAN)]
            log(f"[cpu] {mname} {cmds['version']}, N={np}")
            out[mname] = (cmds["version"], C.interleave(variants, runs, warmup, log))
    finally:
        subprocess.run(["rm", "-rf", work_root])
    return summarize(out, np, opts)


def _med(xs):
    return statistics.median(xs) if xs else None


def summarize(out, np, opts) -> dict:
    rows, verdicts = [], []
    groups, series = [], {"bare: python -c pass, per rank": [], "mpilaunch: adapter, per rank": [],
                          "mpilaunch: job CPU added per rank": []}
    raw = {}
    for mname, (ver, res) in out.items():
        base_runs = res[V_BARE]["runs"]
        py_pass = [c for r in base_runs if r.ok for c in r.extra["workers"]]
        s_pass = C.stats(py_pass)
        groups.append(f"{mname.replace('Open MPI ', 'OMPI ')}\nN={np}")
        raw[mname] = {}
        for v in (V_BARE, V_DEFAULT, V_LEAN):
            rs = [r for r in res[v]["runs"] if r.ok]
            ad = [c for r in rs for c in r.extra["adapters"]]
            wk = [c for r in rs for c in r.extra["workers"]]
            fe = [c for r in rs for c in r.extra["front"]]
            sc = [c for r in rs for c in r.extra["sched"]]
            mp = [r.extra["mpirun"] for r in rs]
            job = [r.cpu for r in rs]
            added = [(a.cpu - b.cpu) / np for a, b in zip(res[v]["runs"], base_runs) if a.ok and b.ok] \
                if v != V_BARE else []
            s_ad, s_add = C.stats(ad), C.stats(added)
            raw[mname][v] = {"adapter": s_ad, "worker": C.stats(wk), "front": C.stats(fe),
                             "sched": C.stats(sc), "mpirun": C.stats(mp), "job": C.stats(job),
                             "added_per_rank": s_add}
            rows.append([f"{mname} {ver}", np, v, len(rs), res[v]["failed"],
                         _f(C.stats(job)), _f(C.stats(mp)), _f(C.stats(fe)), _f(C.stats(sc)),
                         _f(s_ad), _f(C.stats(wk)),
                         "—" if v == V_BARE else _f(s_add),
                         "—" if not s_ad.get("n") or not s_pass.get("n") else f"{s_ad['median'] / s_pass['median']:.2f}x"])
            if v == V_BARE:
                series["bare: python -c pass, per rank"].append(_tri(s_pass))
            if v == V_DEFAULT:
                series["mpilaunch: adapter, per rank"].append(_tri(s_ad))
                series["mpilaunch: job CPU added per rank"].append(_tri(s_add))
                if s_ad.get("n"):
                    verdicts.append({
                        "figure": f"per-rank CPU, {mname}, N={np}: adapter's own user+sys per rank (default)",
                        "value": f"{s_ad['median']:.3f} s ({s_ad['median'] / s_pass['median']:.2f}x `python -c pass` {s_pass['median']:.3f} s)"
                        if s_pass.get("n") else f"{s_ad['median']:.3f} s",
                        "target": "no target (report only)", "met": None})
                if s_add.get("n"):
                    verdicts.append({
                        "figure": f"per-rank CPU, {mname}, N={np}: whole-job CPU added per rank vs bare (default, front-end + scheduler included)",
                        "value": f"{s_add['median']:.3f} s", "target": "no target (report only)", "met": None})
    return {
        "key": "cpu",
        "title": "6. Per-rank CPU cost (user + sys)",
        "method": [
            "**Per process**: `bench/hook/sitecustomize.py` is put first on `PYTHONPATH` (with `BENCH_PROC_LOG`) "
            "for every variant; each Python process of the job appends at exit its own "
            "`resource.getrusage(RUSAGE_SELF)` (all threads, children excluded). The adapter's record is exactly the "
            "adapter's own CPU; the worker's (`python exit_at_once.py`), the scheduler's (`MS_ROLE=MS_SCHED`) and the "
            "front-end's are separate records.",
            "**Whole job**: `os.wait4` on the launcher gives user+sys of it and of everything it reaped "
            "(mpirun, adapters, workers, scheduler). mpirun's own CPU = job - all Python records. "
            "`added per rank` = (job CPU of the variant - job CPU of bare mpirun in the same round) / N.",
            f"Baseline: bare mpirun (the argv mpilaunch builds) running `python -c pass` in each of N={np} ranks. "
            f"Interleaved rounds (bare, default, lean), {'no warm-up' if opts.smoke else '1 warm-up'}, {opts.runs} measured.",
        ],
        "tables": [{
            "title": "CPU seconds (median [min, max])",
            "columns": ["MPI", "N", "variant", "n", "failed", "job CPU", "mpirun (non-Python; incl. the ~5 ms `--version` probe for mpilaunch)", "front-end", "scheduler",
                        "adapter / rank", "worker / rank", "job CPU added / rank", "adapter vs python -c pass"],
            "rows": rows}],
        "verdicts": verdicts,
        "chart": {"title": "Per-rank CPU (user+sys)", "unit": "CPU s", "groups": groups, "series": series},
        "profile": [],
        "raw": raw,
    }


def _f(s):
    if not s.get("n"):
        return "—"
    return f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"


def _tri(s):
    return (s["median"], s["min"], s["max"]) if s.get("n") else None
