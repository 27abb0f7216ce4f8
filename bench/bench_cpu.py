"""6. Per-rank cost: CPU seconds (user + sys) the rank adapter itself spends per rank.

Method (three measurements, same interleaved rounds):

* **Adapter, exact** (``mpirun + adapter`` variants): mpilaunch's own argv (from its planner)
  started without the front-end, each rank's adapter command wrapped in
  ``workloads/rusage_wrap.py`` (``os.wait4``: user+sys of the adapter and of everything it
  reaped). The adapter runs with ``python -S`` (no site), where no hook can run inside it, so
  its own CPU = that figure - the worker's and the scheduler's own records (hook below).
* **Per process** (``hook/sitecustomize.py`` on ``PYTHONPATH`` with ``BENCH_PROC_LOG``):
  every Python process started normally (front-end, worker, scheduler) appends its own
  ``getrusage(RUSAGE_SELF)`` at exit.
* **Whole job** (``os.wait4`` on the launcher): user+sys of everything it reaped.
  ``(job CPU of mpilaunch - job CPU of bare mpirun) / N`` is what a user pays per rank,
  front-end and scheduler included.

Baseline: bare mpirun (the argv mpilaunch builds) running ``python -c pass`` in every rank.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import tempfile

import bench_launch as L
import common as C

WRAP = os.path.join(C.WORKLOADS, "rusage_wrap.py")
V_BARE = "bare mpirun, python -c pass"
V_DEFAULT = L.V_DEFAULT
V_LEAN = L.V_LEAN
V_AD_DEFAULT = "mpirun + adapter (default options), adapter wrapped"
V_AD_LEAN = "mpirun + adapter (--no-scheduler --tail-worker-log none), adapter wrapped"
ORDER = (V_BARE, V_DEFAULT, V_LEAN, V_AD_DEFAULT, V_AD_LEAN)


def _cpu(x):
    return x["utime"] + x["stime"]


def _one(argv, env, cwd, proc_log, wrap_log, np):
    for p in (proc_log, wrap_log):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    env = {**env, "PYTHONPATH": C.HOOK_DIR, "BENCH_PROC_LOG": proc_log}
    r = C.timed_run(argv, env=env, cwd=cwd)
    recs = C.read_proc_log(proc_log)
    wraps = C.read_proc_log(wrap_log)
    front = [_cpu(x) for x in recs if C.classify(x) == "front-end"]
    sched = [_cpu(x) for x in recs if C.classify(x) == "worker" and x.get("ms_role") == "MS_SCHED"]
    workers = [_cpu(x) for x in recs if C.classify(x) == "worker" and x.get("ms_role") != "MS_SCHED"]
    adapters = []
    for w in wraps:   # adapter own = its tree (wait4) - its children's own records
        kids = sum(_cpu(x) for x in recs if x.get("ppid") == w["pid"])
        adapters.append(w["cpu"] - kids)
    r.extra = {"adapters": adapters, "front": front, "sched": sched, "workers": workers,
               "mpirun": r.cpu - sum(_cpu(x) for x in recs) - sum(adapters), "records": len(recs)}
    if r.ok and (len(workers) != np or (wraps and len(wraps) != np)):
        r.rc = -999  # the accounting is incomplete: do not use this run
        r.extra["error"] = f"{len(workers)} worker / {len(wraps)} adapter records for {np} ranks"
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
            plog, wlog = os.path.join(work, "proc.jsonl"), os.path.join(work, "wrap.jsonl")
            bare = list(cmds[L.V_BARE])
            bare[-1:] = ["-c", "pass"]        # ... python exit_at_once.py -> python -c pass
            lean_plan, _ = L._plan(mpath, np, os.path.join(work, "logs"), os.path.join(work, "run-lean"),
                                   ["--no-scheduler", "--tail_worker_log", "none"], C.base_env())
            def_plan, _ = L._plan(mpath, np, os.path.join(work, "logs"), os.path.join(work, "run-def"), [], C.base_env())
            from mpilaunch.backends.openmpi import argv as plan_argv

            def wrapped(plan):
                return plan_argv(C.replace_plan(
                    plan, rank_command=(C.PY, "-S", WRAP, wlog, "--", *plan.rank_command)))
            argvs = {V_BARE: bare, V_DEFAULT: cmds[V_DEFAULT], V_LEAN: cmds[V_LEAN],
                     V_AD_DEFAULT: wrapped(def_plan), V_AD_LEAN: wrapped(lean_plan)}
            variants = [(v, (lambda rnd, a=argvs[v]: _one(a, cmds["env"], work, plog, wlog, np))) for v in ORDER]
            log(f"[cpu] {mname} {cmds['version']}, N={np}")
            out[mname] = (cmds["version"], C.interleave(variants, runs, warmup, log),
                          " ".join(argvs[V_AD_DEFAULT]))
    finally:
        subprocess.run(["rm", "-rf", work_root])
    return summarize(out, np, opts)


def summarize(out, np, opts) -> dict:
    rows, verdicts = [], []
    groups, series = [], {"bare: python -c pass, per rank": [], "mpilaunch: adapter's own CPU, per rank": [],
                          "mpilaunch: job CPU added per rank": []}
    raw = {}
    example = None
    for mname, (ver, res, ex) in out.items():
        example = example or ex
        base_runs = res[V_BARE]["runs"]
        s_pass = C.stats([c for r in base_runs if r.ok for c in r.extra["workers"]])
        groups.append(f"{mname.replace('Open MPI ', 'OMPI ')}\nN={np}")
        raw[mname] = {}
        for v in ORDER:
            rs = [r for r in res[v]["runs"] if r.ok]
            ad = [c for r in rs for c in r.extra["adapters"]]
            s_ad = C.stats(ad)
            added = [(a.cpu - b.cpu) / np for a, b in zip(res[v]["runs"], base_runs) if a.ok and b.ok] \
                if v != V_BARE else []
            s_add = C.stats(added)
            st = {"adapter": s_ad, "worker": C.stats([c for r in rs for c in r.extra["workers"]]),
                  "front": C.stats([c for r in rs for c in r.extra["front"]]),
                  "sched": C.stats([c for r in rs for c in r.extra["sched"]]),
                  "mpirun": C.stats([r.extra["mpirun"] for r in rs]), "job": C.stats([r.cpu for r in rs]),
                  "added_per_rank": s_add}
            raw[mname][v] = st
            rows.append([f"{mname} {ver}", np, v, len(rs), res[v]["failed"], _f(st["job"]), _f(st["mpirun"]),
                         _f(st["front"]), _f(st["sched"]), _f(s_ad), _f(st["worker"]),
                         "—" if v == V_BARE else _f(s_add),
                         "—" if not s_ad.get("n") or not s_pass.get("n") else f"{s_ad['median'] / s_pass['median']:.2f}x"])
        a_def = raw[mname][V_AD_DEFAULT]["adapter"]
        add_def = raw[mname][V_DEFAULT]["added_per_rank"]
        series["bare: python -c pass, per rank"].append(_tri(s_pass))
        series["mpilaunch: adapter's own CPU, per rank"].append(_tri(a_def))
        series["mpilaunch: job CPU added per rank"].append(_tri(add_def))
        if a_def.get("n"):
            verdicts.append({
                "figure": f"per-rank CPU, {mname}, N={np}: the adapter's own user+sys per rank (default options)",
                "value": f"{a_def['median']:.3f} s" + (f" ({a_def['median'] / s_pass['median']:.2f}x a `python -c pass`, "
                                                        f"{s_pass['median']:.3f} s)" if s_pass.get("n") else ""),
                "target": "no target (report only)", "met": None})
        if add_def.get("n"):
            verdicts.append({
                "figure": f"per-rank CPU, {mname}, N={np}: whole-job CPU added per rank vs bare mpirun "
                          "(mpilaunch default: front-end, adapters, scheduler, mpirun's extra work)",
                "value": f"{add_def['median']:.3f} s", "target": "no target (report only)", "met": None})
    return {
        "key": "cpu",
        "title": "6. Per-rank CPU cost (user + sys)",
        "method": [
            "**Adapter, exact**: mpilaunch's own mpirun argv (from its planner) started without the front-end, with each "
            "rank's adapter command wrapped in `bench/workloads/rusage_wrap.py` (`os.wait4`: user+sys of the adapter and "
            "of everything it reaped); the adapter starts with `python -S` (no site), where no hook runs inside it, so "
            "its own CPU = that - its worker's and scheduler's own records.",
            "**Per process**: `bench/hook/sitecustomize.py` first on `PYTHONPATH` (with `BENCH_PROC_LOG`): every Python "
            "process started normally (front-end, worker `exit_at_once.py`, scheduler `MS_ROLE=MS_SCHED`) appends its "
            "own `getrusage(RUSAGE_SELF)` (all threads, children excluded) at exit.",
            "**Whole job**: `os.wait4` on the launcher (mpirun, adapters, workers, scheduler, all reaped). "
            "`mpirun` column = job - every accounted Python process (includes the `mpirun --version` probe, ~5 ms). "
            "`added / rank` = (job CPU - job CPU of bare mpirun in the same round) / N.",
            f"Baseline: bare mpirun (the argv mpilaunch builds) running `python -c pass` in each of N={np} ranks. "
            f"Interleaved rounds in the order of the table, {'no warm-up' if opts.smoke else '1 warm-up'}, {opts.runs} measured."
            + (f" Example wrapped argv: `{example}`." if example else ""),
        ],
        "tables": [{
            "title": "CPU seconds (median [min, max])",
            "columns": ["MPI", "N", "variant", "n", "failed", "job CPU", "mpirun", "front-end", "scheduler",
                        "adapter / rank (own)", "worker / rank", "job CPU added / rank", "adapter vs python -c pass"],
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
