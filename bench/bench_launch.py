"""1. Launch overhead: ``examples/exit_at_once.py`` in N ranks, mpilaunch against bare mpirun.

The bare baseline is the exact argv mpilaunch builds (same mpirun, np, normalised hostfile,
tune file, bind/map/mca/-x args, ``--allow-run-as-root``, same interpreter) with the rank
command ``python -m mpilaunch.rank ... -- SCRIPT`` replaced by ``python SCRIPT``: it is taken
from mpilaunch's own planner (``config.build`` -> ``plan.make_plan`` -> ``plan.argv``), so the
flags cannot drift apart. Variants, interleaved in this order every round:

* ``bare mpirun``: the baseline;
* ``mpilaunch (default)``: ``python -m mpilaunch --mpirun M -np N SCRIPT`` (scheduler on
  rank 0, every rank tailed to the console);
* ``mpilaunch --no-scheduler --tail_worker_log none``;
* ``mpirun + adapter``: mpilaunch's default argv started directly, without the front-end
  (so front-end cost = default - this, adapter cost = this - bare).

Every variant gets ``--master_port 48199`` (nothing listens there: the script exits before a
scheduler would bind) so that the rank-0 port check cannot collide with other jobs on 8118.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import tempfile
from typing import Dict, List

import common as C

SCRIPT = os.path.join(C.EXAMPLES, "exit_at_once.py")
TARGET_N = 4
TARGET_ADDED = 0.3
V_BARE = "bare mpirun"
V_DEFAULT = "mpilaunch (default)"
V_LEAN = "mpilaunch --no-scheduler --tail_worker_log none"
V_ADAPTER = "mpirun + adapter (no front-end)"


def _plan(mpirun: str, np: int, log_dir: str, run_dir: str, extra: List[str], env: Dict[str, str]):
    from mpilaunch import cli, config, launcher, mpi
    from mpilaunch import plan as planmod

    args = cli.run_parser().parse_args(
        ["--mpirun", mpirun, "-np", str(np), "--master_port", str(C.QUIET_PORT),
         "--log_dir", log_dir, *extra, SCRIPT])
    cfg = config.build(args, env)
    info = mpi.detect(cfg.mpirun, env)
    plan = planmod.make_plan(cfg, env, info, run_dir, os.geteuid())
    launcher.write_files(plan)
    return plan, info


def commands(mpirun: str, np: int, work: str) -> dict:
    """argv of every variant for one (mpirun, N); files written under ``work``."""
    from mpilaunch import plan as planmod

    env = C.base_env()
    log_dir = os.path.join(work, "logs")
    run_dir = os.path.join(work, "run")
    os.makedirs(run_dir, exist_ok=True)
    plan, info = _plan(mpirun, np, log_dir, run_dir, [], env)
    bare = planmod.argv(dataclasses.replace(plan, rank_command=(C.PY, SCRIPT)))
    front = [C.PY, "-m", "mpilaunch", "--mpirun", mpirun, "-np", str(np),
             "--master_port", str(C.QUIET_PORT), "--log_dir", log_dir]
    return {
        "env": {**env, **plan.extra_env},
        "version": info.version_str,
        V_BARE: bare,
        V_DEFAULT: front + [SCRIPT],
        V_LEAN: front + ["--no-scheduler", "--tail_worker_log", "none", SCRIPT],
        V_ADAPTER: planmod.argv(plan),
    }


def _traced(argv, env, cwd, proc_log) -> dict:
    """One run with the accounting hook: when each kind of process started and ended."""
    env = {**env, "PYTHONPATH": C.HOOK_DIR, "BENCH_PROC_LOG": proc_log}
    t0 = __import__("time").time()
    r = C.timed_run(argv, env=env, cwd=cwd)
    recs = C.read_proc_log(proc_log)
    by = {}
    for rec in recs:
        by.setdefault(C.classify(rec), []).append(rec)
    out = {"wall": r.wall, "rc": r.rc, "job_cpu": r.cpu}

    def rel(x):
        return x - t0 if x is not None else None

    for kind, rs in by.items():
        out[kind] = {
            "count": len(rs),
            "first_start": min(rel(x["t_start"]) for x in rs),
            "last_start": max(rel(x["t_start"]) for x in rs),
            "first_exit": min(rel(x["t_exit"]) for x in rs),
            "last_exit": max(rel(x["t_exit"]) for x in rs),
            "cpu_each": statistics.median(x["utime"] + x["stime"] for x in rs),
            "startup_each": statistics.median(x["t_site"] - x["t_start"] for x in rs),
        }
    return out


def run(opts, log) -> dict:
    mpis = [("Open MPI 5", C.OMPI5), ("Open MPI 4.1", C.OMPI4)]
    mpis = [(n, p) for n, p in mpis if C.mpi_available(p)]
    sizes = [1, 2] if opts.smoke else [1, 2, 4, 8]
    if opts.smoke:
        mpis = mpis[:1]
    runs, warmup = opts.runs, (0 if opts.smoke else 1)
    work_root = tempfile.mkdtemp(prefix="bench-launch-")
    results = {}
    shown_cmds = {}
    versions = {}
    for mname, mpath in mpis:
        for np in sizes:
            work = os.path.join(work_root, f"{os.path.basename(os.path.dirname(mpath))}-{np}")
            os.makedirs(work, exist_ok=True)
            cmds = commands(mpath, np, work)
            versions[mname] = cmds["version"]
            label = f"{mname} {cmds['version']}"
            env = cmds["env"]
            variants = [(v, (lambda rnd, a=cmds[v]: C.timed_run(a, env=env, cwd=work)))
                        for v in (V_BARE, V_DEFAULT, V_LEAN, V_ADAPTER)]
            log(f"[launch] {label}, N={np}")
            res = C.interleave(variants, runs, warmup, log)
            results[(mname, np)] = res
            if np == (TARGET_N if TARGET_N in sizes else sizes[-1]):
                shown_cmds[mname] = {v: cmds[v] for v in (V_BARE, V_DEFAULT, V_LEAN, V_ADAPTER)}
    # profile: one traced run per variant per MPI at the target size (hook on), and the
    # cost of the front-end's `mpirun --version` probe
    profile = {}
    np_p = TARGET_N if TARGET_N in sizes else sizes[-1]
    for mname, mpath in mpis:
        work = os.path.join(work_root, f"profile-{os.path.basename(os.path.dirname(mpath))}")
        os.makedirs(work, exist_ok=True)
        cmds = commands(mpath, np_p, work)
        prof = {}
        for v in (V_BARE, V_DEFAULT, V_LEAN, V_ADAPTER):
            prof[v] = _traced(cmds[v], cmds["env"], work, os.path.join(work, f"proc-{len(prof)}.jsonl"))
        probes = [C.timed_run([mpath, "--version"]).wall for _ in range(3 if opts.smoke else 7)]
        prof["mpirun --version"] = statistics.median(probes)
        dry = [C.timed_run(cmds[V_DEFAULT][:3] + ["--dry-run"] + cmds[V_DEFAULT][3:], env=cmds["env"], cwd=work).wall
               for _ in range(3 if opts.smoke else 7)]
        prof["mpilaunch --dry-run"] = statistics.median(dry)
        py_start = [C.timed_run([C.PY, "-c", "pass"]).wall for _ in range(3 if opts.smoke else 7)]
        prof["python -c pass"] = statistics.median(py_start)
        profile[mname] = prof
    subprocess.run(["rm", "-rf", work_root])
    return summarize(results, shown_cmds, profile, sizes, mpis, versions, opts)


def summarize(results, shown_cmds, profile, sizes, mpis, versions, opts) -> dict:
    rows, verdicts = [], []
    chart_groups, chart_series = [], {v: [] for v in (V_BARE, V_DEFAULT, V_LEAN, V_ADAPTER)}
    for mname, _ in mpis:
        for np in sizes:
            res = results[(mname, np)]
            base = C.stats(C.ok_values(res[V_BARE]))
            chart_groups.append(f"{mname.replace('Open MPI ', 'OMPI ')}\nN={np}")
            for v in (V_BARE, V_DEFAULT, V_LEAN, V_ADAPTER):
                s = C.stats(C.ok_values(res[v]))
                d = C.stats(C.paired_deltas(res[v], res[V_BARE])) if v != V_BARE else {"n": 0}
                rows.append([f"{mname} {versions[mname]}", np, v, *_msm(s), s.get("n", 0),
                             res[v]["failed"],
                             "—" if v == V_BARE else _ratio(C.ratio(s, base)),
                             "—" if v == V_BARE else _delta(d)])
                chart_series[v].append(_tri(s))
                at_target = np == TARGET_N
                if (at_target or (TARGET_N not in sizes and np == sizes[-1])) and v in (V_DEFAULT, V_LEAN):
                    val = d.get("median")
                    verdicts.append({
                        "figure": f"launch overhead, {mname}, N={np}: {v} - bare mpirun (median of paired differences)",
                        "value": "—" if val is None else f"{val:+.3f} s",
                        "target": f"<= +{TARGET_ADDED} s" + ("" if at_target else f" (at N={TARGET_N}; not run)"),
                        "met": None if val is None or not at_target else val <= TARGET_ADDED})
    prof_lines = _profile_lines(profile, versions)
    return {
        "key": "launch",
        "title": "1. Launch overhead (exit_at_once.py, N ranks)",
        "method": [
            "Wall time from spawning the launcher to its exit (`os.wait4`), stdout/stderr to /dev/null, "
            "run from a scratch directory. Baseline: bare mpirun with **the argv mpilaunch builds** "
            "(taken from `mpilaunch.plan.argv`, identical hostfile `localhost slots=N`, tune file, "
            "`--bind-to none --map-by slot`, the ModelArts `--mca`/`-x` args, `--allow-run-as-root`, same "
            "interpreter `" + C.PY + "`) with the rank command replaced by `python exit_at_once.py`.",
            "mpilaunch runs as `python -m mpilaunch --mpirun M -np N --master_port 48199 --log_dir D SCRIPT` "
            "(the default: scheduler on rank 0, all ranks tailed) and with `--no-scheduler --tail_worker_log none`. "
            "`mpirun + adapter` is the default mpilaunch argv started without the front-end (separates "
            "front-end cost from rank-side cost).",
            f"Rounds interleaved in the order bare, default, lean, adapter; {'no warm-up (smoke)' if opts.smoke else '1 warm-up round discarded'}; "
            f"{opts.runs} measured round(s). Added time = median over rounds of (variant - bare) in the same round.",
        ],
        "tables": [{
            "title": "Wall time (s)",
            "columns": ["MPI", "N", "variant", "median", "min", "max", "n", "failed", "ratio vs bare", "added vs bare (median [min, max])"],
            "rows": rows}],
        "commands": {f"{m} (N={TARGET_N if TARGET_N in sizes else sizes[-1]})": c for m, c in shown_cmds.items()},
        "verdicts": verdicts,
        "chart": {"title": "Launch: exit_at_once.py wall time", "unit": "s", "groups": chart_groups,
                  "series": chart_series},
        "profile": prof_lines,
        "raw": {"profile": profile},
    }


def _profile_lines(profile, versions) -> List[str]:
    lines = []
    for mname, p in profile.items():
        lines.append(f"**{mname} {versions.get(mname, '')}, one traced run per variant at N={TARGET_N}** "
                     "(bench/hook/sitecustomize.py records each Python process's start, exit and own CPU; "
                     "times in s after the launcher was spawned; the hook itself slows start-up slightly):")
        lines.append("")
        lines.append("| variant | wall | front-end start→exit (CPU) | adapters start (first–last) | adapter CPU each | workers start (first–last) | workers exit (last) | worker CPU each | launcher exit |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for v in (V_BARE, V_DEFAULT, V_LEAN, V_ADAPTER):
            t = p.get(v)
            if not isinstance(t, dict):
                continue
            fe, ad, wk = t.get("front-end"), t.get("adapter"), t.get("worker")
            lines.append("| " + " | ".join([
                v, f"{t['wall']:.3f}",
                f"{fe['first_start']:.3f}→{fe['last_exit']:.3f} ({fe['cpu_each']:.3f})" if fe else "—",
                f"{ad['first_start']:.3f}–{ad['last_start']:.3f}" if ad else "—",
                f"{ad['cpu_each']:.3f}" if ad else "—",
                f"{wk['first_start']:.3f}–{wk['last_start']:.3f}" if wk else "—",
                f"{wk['last_exit']:.3f}" if wk else "—",
                f"{wk['cpu_each']:.3f}" if wk else "—",
                f"{t['wall']:.3f}"]) + " |")
        lines.append("")
        lines.append(f"Front-end pieces (medians of repeated runs): `python -c pass` {p['python -c pass']:.3f} s, "
                     f"`mpirun --version` (mpilaunch probes it on every launch) {p['mpirun --version']:.3f} s, "
                     f"`mpilaunch --dry-run` (start-up, imports, probe, planning; nothing launched) {p['mpilaunch --dry-run']:.3f} s.")
        lines.append("")
    return lines


def _msm(s):
    if not s.get("n"):
        return ["—", "—", "—"]
    return [f"{s['median']:.3f}", f"{s['min']:.3f}", f"{s['max']:.3f}"]


def _tri(s):
    return (s["median"], s["min"], s["max"]) if s.get("n") else None


def _ratio(r):
    return "—" if r is None else f"{r:.2f}x"


def _delta(d):
    if not d.get("n"):
        return "—"
    return f"{d['median']:+.3f} [{d['min']:+.3f}, {d['max']:+.3f}]"
