"""4. Planning at scale, in-process: hostfile parse, validation, mpirun argv and tune-file
rendering for H hosts x 8 slots with 1,000 broadcast variables, and the size of what is
handed to ``execve`` against the kernel's limits.

Stages timed separately (``time.perf_counter``), for a fixed ``MpiInfo`` of each dialect
(no subprocess): ``hostfile.read_hostfile``; ``options.parser().parse_args`` +
``launchconfig.build`` (validation; reads the hostfile again); ``plan.make_plan``; ``plan.argv``;
``broadcast.render`` + ``hostfile.render_hostfile``. *total* = config + make_plan + argv + render
(what one launch does before ``execve``, except writing the two files).

There is no competing planner to race, so the reference measured in the same rounds is
the one subprocess every launch already pays for: ``mpirun --version`` (``mpi.detect``).
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Dict, List

import common as C

SLOTS = 8
N_VARS = 1000
TARGET_S = 0.1
MAX_ARG_STRLEN = 32 * 4096     # Linux: one argv/env string at most 32 pages (131072 bytes)


def make_env(n_vars: int = N_VARS) -> Dict[str, str]:
    """PATH + ``n_vars`` broadcast variables: 90% portable values (tune file), 5% with
    whitespace/quotes (routed through mpirun's env), 5% secret-looking names (routed)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    for i in range(n_vars):
        if i % 20 == 0:
            env[f"MA_BENCH_TOKEN_{i:05d}"] = f"s3cr3t-{i:05d}-" + "x" * 24
        elif i % 20 == 1:
            env[f"MA_BENCH_SPACED_{i:05d}"] = f"value with spaces and 'quotes' {i}"
        else:
            env[f"MA_BENCH_VAR_{i:05d}"] = f"/opt/bench/{i:05d}/value-" + "v" * (i % 40)
    return env


def write_hostfile(path: str, hosts: int) -> None:
    with open(path, "w") as fh:
        for i in range(hosts):
            fh.write(f"node-{i // 65536}-{(i // 256) % 256}-{i % 256}.cluster.local slots={SLOTS}\n")


def exec_size(argv: List[str], env: Dict[str, str]) -> dict:
    """Bytes execve needs: strings with their NULs plus one pointer per string (+ NULL ends)."""
    ptr = 8
    a = sum(len(x.encode()) + 1 for x in argv) + ptr * (len(argv) + 1)
    e = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items()) + ptr * (len(env) + 1)
    longest = max([len(x.encode()) + 1 for x in argv] + [len(k.encode()) + len(v.encode()) + 2 for k, v in env.items()])
    return {"argv_bytes": a, "env_bytes": e, "total": a + e, "args": len(argv), "longest": longest}


def one_round(path: str, env: Dict[str, str], info, run_dir: str) -> dict:
    from mpilaunch.config import launchconfig, options
    from mpilaunch.config import hostfile as hf
    from mpilaunch.backends import openmpi as planmod
    from mpilaunch.config import broadcast

    script = os.path.join(C.EXAMPLES, "exit_at_once.py")
    t = {}
    t0 = time.perf_counter()
    hosts = hf.read_hostfile(path)
    t["parse"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    args = options.parser().parse_args(["--hostfile", path, script])
    cfg = launchconfig.build(args, env)
    t["config"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    plan = planmod.make_plan(cfg, env, info, run_dir, 0)
    t["make_plan"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    argv = planmod.argv(plan)
    t["argv"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    tune_text = broadcast.render(plan.broadcast)
    host_text = hf.render_hostfile(plan.hosts)
    t["render"] = time.perf_counter() - t0
    t["total"] = t["config"] + t["make_plan"] + t["argv"] + t["render"]
    facts = {"hosts": len(hosts), "np": plan.np, "exec": exec_size(argv, {**env, **plan.extra_env}),
             "tune_lines": tune_text.count("\n"), "tune_bytes": len(tune_text.encode()),
             "tune_longest_line": max((len(l.encode()) + 1 for l in tune_text.splitlines()), default=0),
             "hostfile_bytes": len(host_text.encode()), "routed": len(plan.broadcast.routed),
             "in_file": len(plan.broadcast.in_file)}
    return {"t": t, "facts": facts}


def run(opts, log) -> dict:
    from mpilaunch.config.mpi import OMPI4, OMPI5, MpiInfo

    sizes = [1, 100] if opts.smoke else [1, 100, 1000, 10000]
    rounds = 1 if opts.smoke else max(opts.runs, 7)
    warmup = 0 if opts.smoke else 1
    infos = {"Open MPI 5 (fixed MpiInfo 5.0.11)": MpiInfo("/opt/bench/bin/mpirun", (5, 0, 11), OMPI5),
             "Open MPI 4.1 (fixed MpiInfo 4.1.4)": MpiInfo("/usr/bin/mpirun", (4, 1, 4), OMPI4)}
    env = make_env()
    work = tempfile.mkdtemp(prefix="bench-plan-")
    paths = {}
    for h in sizes:
        paths[h] = os.path.join(work, f"hosts-{h}")
        write_hostfile(paths[h], h)
    times = {(d, h): [] for d in infos for h in sizes}
    facts = {}
    probe = []
    probe_mpi = C.OMPI5 if C.mpi_available(C.OMPI5) else C.OMPI4
    log(f"[plan] sizes {sizes} hosts x {SLOTS} slots, {N_VARS} broadcast variables, {rounds} rounds")
    for rnd in range(warmup + rounds):
        for d, info in infos.items():
            for h in sizes:
                r = one_round(paths[h], env, info, work)
                if rnd >= warmup:
                    times[(d, h)].append(r["t"])
                facts[(d, h)] = r["facts"]
        if C.mpi_available(probe_mpi):
            p = C.timed_run([probe_mpi, "--version"])
            if rnd >= warmup:
                probe.append(p.wall)
        log(f"  round {rnd + 1}/{warmup + rounds}" + (" (warm-up)" if rnd < warmup else "") + ": "
            + ", ".join(f"{h}: {times[(d, h)][-1]['total'] * 1e3:.1f} ms" for d in list(infos)[:1] for h in sizes
                        if times[(d, h)]))
    __import__("shutil").rmtree(work, ignore_errors=True)
    return summarize(times, facts, probe, sizes, infos, opts, rounds)


def summarize(times, facts, probe, sizes, infos, opts, rounds) -> dict:
    arg_max = os.sysconf("SC_ARG_MAX")
    s_probe = C.stats(probe)
    rows, lim_rows, verdicts = [], [], []
    groups = [f"{h:,} hosts" for h in sizes]
    series = {}
    for d in infos:
        series[f"total, {d.split(' (')[0]}"] = []
        for h in sizes:
            ts = times[(d, h)]
            st = {k: C.stats([t[k] for t in ts]) for k in ("parse", "config", "make_plan", "argv", "render", "total")}
            f = facts[(d, h)]
            rows.append([d, f"{h:,}", f"{f['np']:,}"] + [_ms(st[k]) for k in ("parse", "config", "make_plan", "argv", "render")]
                        + [_ms_full(st["total"]), f"{st['total']['median'] * 1e6 / h:.1f}",
                           "—" if not s_probe.get("n") else f"{st['total']['median'] / s_probe['median']:.2f}x"])
            series[f"total, {d.split(' (')[0]}"].append(
                (st["total"]["median"] * 1e3, st["total"]["min"] * 1e3, st["total"]["max"] * 1e3))
            e = f["exec"]
            lim_rows.append([d, f"{h:,}", e["args"], f"{e['argv_bytes']:,}", f"{e['env_bytes']:,}",
                             f"{e['total']:,}", f"{100 * e['total'] / arg_max:.2f}%", f"{e['longest']:,}",
                             f"{100 * e['longest'] / MAX_ARG_STRLEN:.2f}%", f"{f['in_file']} / {f['routed']}",
                             f"{f['tune_bytes']:,}", f['tune_longest_line'], f"{f['hostfile_bytes']:,}"])
        big = sizes[-1]
        st_big = C.stats([t["total"] for t in times[(d, big)]])
        verdicts.append({"figure": f"planning, {d}: total at {big:,} hosts x {SLOTS} slots, {N_VARS} variables",
                         "value": f"{st_big['median'] * 1e3:.1f} ms", "target": f"< {TARGET_S * 1e3:.0f} ms",
                         "met": st_big["median"] < TARGET_S})
        if len(sizes) >= 2:
            a, b = sizes[-2], sizes[-1]
            ta = C.stats([t["total"] for t in times[(d, a)]])["median"]
            tb = st_big["median"]
            growth = tb / ta
            verdicts.append({"figure": f"planning, {d}: growth {a:,} -> {b:,} hosts (x{b // a})",
                             "value": f"x{growth:.2f} time", "target": f"<= x{b // a} (linear)",
                             "met": growth <= (b / a) * 1.15})
        worst = max(facts[(d, h)]["exec"]["total"] for h in sizes)
        longest = max(facts[(d, h)]["exec"]["longest"] for h in sizes)
        verdicts.append({"figure": f"planning, {d}: mpirun execve size (argv + env), largest over all sizes",
                         "value": f"{worst:,} B = {100 * worst / arg_max:.2f}% of ARG_MAX {arg_max:,}; longest string {longest:,} B = {100 * longest / MAX_ARG_STRLEN:.2f}% of MAX_ARG_STRLEN",
                         "target": "far below both", "met": worst < arg_max / 4 and longest < MAX_ARG_STRLEN / 4})
    probe_txt = "—" if not s_probe.get("n") else f"{s_probe['median'] * 1e3:.1f} ms"
    return {
        "key": "plan",
        "title": "4. Planning at scale (in-process)",
        "method": [
            f"Hostfiles of 1 to 10,000 hosts (`node-a-b-c.cluster.local slots={SLOTS}`), an environment of PATH + "
            f"{N_VARS} broadcast variables (`MA_BENCH_*`: 90% portable values -> tune file, 5% with spaces/quotes and "
            "5% secret-looking names -> routed through mpirun's env as `-x NAME`), a fixed `MpiInfo` per dialect "
            "(no subprocess). Stages: `hostfile.read_hostfile`; `options.parser().parse_args` + `launchconfig.build` "
            "(validation, reads the hostfile again); `plan.make_plan`; `plan.argv`; `broadcast.render` + "
            "`hostfile.render_hostfile`. total = config + make_plan + argv + render.",
            f"{'No warm-up' if opts.smoke else '1 warm-up round'}, {rounds} measured round(s); each round runs every "
            "size and dialect, then one `mpirun --version` (the subprocess `mpi.detect` runs on every launch), "
            "which is the reference column (there is no other planner to race).",
            "execve size: argv and environment strings with their NULs plus one 8-byte pointer each, against "
            f"`os.sysconf('SC_ARG_MAX')` = {arg_max:,} and MAX_ARG_STRLEN = {MAX_ARG_STRLEN:,} (one string).",
        ],
        "tables": [
            {"title": "Time (ms, median; total with [min, max]); us per host; total vs one `mpirun --version` "
                      f"({probe_txt})",
             "columns": ["dialect", "hosts", "np", "parse", "config (incl. parse)", "make_plan", "argv", "render",
                         "total", "us/host", "total vs probe"],
             "rows": rows},
            {"title": "What is handed to execve and written to disk",
             "columns": ["dialect", "hosts", "argv items", "argv bytes", "env bytes", "argv+env", "of ARG_MAX",
                         "longest string", "of MAX_ARG_STRLEN", "tune-file / routed vars", "tune file bytes",
                         "longest tune line", "hostfile bytes"],
             "rows": lim_rows}],
        "verdicts": verdicts,
        "chart": {"title": "Planning total (in-process)", "unit": "ms", "groups": groups, "series": series,
                  "log": True},
        "profile": [],
        "raw": {"probe": s_probe},
    }


def _ms(s):
    return "—" if not s.get("n") else f"{s['median'] * 1e3:.2f}"


def _ms_full(s):
    return "—" if not s.get("n") else f"{s['median'] * 1e3:.2f} [{s['min'] * 1e3:.2f}, {s['max'] * 1e3:.2f}]"
