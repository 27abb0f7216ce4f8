#!/usr/bin/env python3
"""mpilaunch benchmark suite: one command runs everything and writes the report.

    python3 bench/run.py [--smoke] [--runs N] [--only NAME,...] [--out bench/report]

Sections (NAME for --only): launch, msstart, teardown, plan, relay, cpu, hydra, multihost, scale. Writes
``<out>/REPORT.md``, ``<out>/chart.png`` (if matplotlib is importable) and
``<out>/results.json``. ``--smoke``: tiny sizes, 1 run, MindSpore baselines skipped (the
CI test, tests/e2e/test_bench_smoke.py). See bench/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)
if REPO not in sys.path:  # mpilaunch from this checkout even when not installed
    sys.path.insert(1, REPO)

import common as C  # noqa: E402
import report as R  # noqa: E402

SMOKE_BUDGET_S = 85      # tests/e2e/test_bench_smoke.py requires the smoke run to end within 90 s
SMOKE_MS_COST_S = 30     # what one MindSpore smoke section costs on a loaded 2-core machine
SECTIONS = ["launch", "msstart", "teardown", "plan", "relay", "cpu", "hydra", "multihost", "scale"]
MODULES = {"launch": "bench_launch", "msstart": "bench_msstart", "teardown": "bench_teardown",
           "plan": "bench_plan", "relay": "bench_relay", "cpu": "bench_cpu", "hydra": "bench_hydra",
           "multihost": "bench_multihost", "scale": "bench_scale"}
TITLES = {"launch": "1. Launch overhead (exit_at_once.py, N ranks)",
          "msstart": "2. MindSpore cluster start (2 workers, init() only)",
          "teardown": "3. Failure teardown (SIGKILL of one of 2 MindSpore workers)",
          "plan": "4. Planning at scale (in-process)",
          "relay": "5. Log relay (200 MB of lines through the supervisor)",
          "cpu": "6. Per-rank CPU cost (user + sys)",
          "hydra": "7. Launch overhead on Open MPI, MPICH and Intel MPI (N=4)",
          "multihost": "8. Multi-host launch (namespace hosts, ssh)",
          "scale": "9. Scale: launch time against hosts (namespace hosts, ssh)"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Run the mpilaunch benchmark suite and write the report.")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 1 run each, MindSpore baselines skipped")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per variant (default 5; smoke 1)")
    ap.add_argument("--only", default=None, help="comma list of sections: " + ",".join(SECTIONS))
    ap.add_argument("--out", default=os.path.join("bench", "report"), help="report directory (default bench/report)")
    ap.add_argument("--no-chart", action="store_true", help="do not draw chart.png")
    ap.add_argument("--render-only", metavar="RESULTS_JSON", default=None,
                    help="measure nothing: re-render REPORT.md/chart.png from a results.json")
    a = ap.parse_args(argv)
    if a.runs is None:
        a.runs = 1 if a.smoke else 5
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    a.sections = SECTIONS if not a.only else [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in a.sections if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    return a


QUIET = 0.5   # 1-minute load per core below which the machine counts as quiet


def _settle(log, limit: float) -> float:
    """Wait (at most ``limit`` s) until the 1-minute load average is quiet: it still carries
    whatever ran in the minutes before. -> seconds waited."""
    t0 = time.time()
    quiet = QUIET * (os.cpu_count() or 1)
    while time.time() - t0 < limit and os.getloadavg()[0] > quiet:
        if int(time.time() - t0) % 30 == 0:
            log(f"waiting for a quiet machine: 1-min load {os.getloadavg()[0]:.2f} > {quiet:g}")
        time.sleep(1)
    return round(time.time() - t0, 1)


def main(argv=None) -> int:
    raw_argv = sys.argv[1:] if argv is None else list(argv)
    opts = parse_args(raw_argv)
    out = os.path.abspath(opts.out)
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    command = "python3 bench/run.py" + ("" if not raw_argv else " " + shlex.join(raw_argv))

    def log(msg):
        print(msg, flush=True)

    if opts.render_only:
        with open(opts.render_only) as fh:
            saved = json.load(fh)
        return write_report(saved["meta"], saved["sections"], out, opts, log)
    settled = _settle(log, 0 if opts.smoke else 300)
    t_start = time.time()
    suite_tmp = tempfile.mkdtemp(prefix="mpilaunch-bench-")
    env_before = C.setup_bytecode_cache(suite_tmp)
    C.CLEAN_PY = C.make_clean_python(suite_tmp) if "launch" in opts.sections and not opts.smoke else None
    C.prewarm([C.PY, C.CLEAN_PY, C.MS_PY if C.ms_available() else None])
    import analysis
    tree_start = C.source_state()
    meta = {
        "mpilaunch_source": analysis.snapshot_source(),
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "machine": C.machine(), "load_start": C.loadavg(), "command": command, "smoke": opts.smoke,
        "settled_s": settled,
        "runs": opts.runs, "warmup": "none" if opts.smoke else "1 round per benchmark (discarded)",
        "commit": C.git_commit(),
        "environment": {
            "bytecode": "cached (PYTHONPYCACHEPREFIX under the suite's temp dir, warmed before measuring); "
                        f"caller's PYTHONDONTWRITEBYTECODE={env_before['PYTHONDONTWRITEBYTECODE']!r} ignored",
            "skipped_pth": C.skipped_pth_files(),
            "clean_python": C.CLEAN_PY,
            "python_start": _python_start(),
        },
        "versions": {"Open MPI 5": C.mpi_version(C.OMPI5), "Open MPI 4.1": C.mpi_version(C.OMPI4),
                     "MindSpore": C.ms_version(), "msrun": C.MSRUN if C.ms_available() else None},
    }
    log(f"mpilaunch bench: {', '.join(opts.sections)}; runs={opts.runs}{' (smoke)' if opts.smoke else ''}; "
        f"load {meta['load_start']}; report -> {out}")
    try:
        sections = run_sections(opts, meta, log, t_start)
    finally:
        __import__("shutil").rmtree(suite_tmp, ignore_errors=True)
    tree_end = C.source_state()
    if tree_end != tree_start:
        meta["source_changed"] = C.source_change(tree_start, tree_end)
    meta["load_end"] = C.loadavg()
    meta["duration_s"] = time.time() - t_start
    # other jobs: judged at the start (after _settle); the end load is the suite's own doing
    # (its last sections run mpirun, ssh and sshd without pause; N=64 oversubscribes 2 cores)
    meta["loaded"] = (meta["load_start"][:1] or [0])[0] > QUIET * (os.cpu_count() or 1)
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump({"meta": meta, "sections": sections}, fh, indent=1, default=_jsonable)
    rc = write_report(meta, sections, out, opts, log)
    failed = [s["key"] for s in sections if s.get("error")]
    return 1 if failed else rc


def run_sections(opts, meta, log, t_start):
    sections = []
    # smoke (CI): cheap sections first, then the MindSpore ones while the time budget lasts
    order = sorted(opts.sections, key=lambda n: n in ("msstart", "teardown")) if opts.smoke else opts.sections
    for name in order:
        if opts.smoke and name in ("msstart", "teardown") and time.time() - t_start > SMOKE_BUDGET_S - SMOKE_MS_COST_S:
            sections.append(_skipped_for_budget(name))
            log(f"[{name}] skipped: smoke time budget")
            continue
        mod = __import__(MODULES[name])
        l0, t0 = C.loadavg(), time.time()
        try:
            sec = mod.run(opts, log)
        except Exception as exc:  # the report still gets written, with the failure in it
            traceback.print_exc()
            sec = {"key": name, "title": TITLES[name], "method": [], "tables": [], "verdicts": [
                {"figure": TITLES[name], "value": "section failed", "target": "—", "met": None}],
                   "chart": None, "profile": [], "error": f"{type(exc).__name__}: {exc}", "raw": {}}
        sec["load"] = (l0, C.loadavg())
        sec["duration_s"] = time.time() - t0
        sections.append(sec)
        log(f"[{name}] done in {sec['duration_s']:.0f} s")
    sections.sort(key=lambda s: SECTIONS.index(s["key"]))
    return sections


def write_report(meta, sections, out, opts, log) -> int:
    import analysis
    notes = analysis.explain(sections, meta)
    chart = None
    if not opts.no_chart:
        chart = R.render_chart(sections, os.path.join(out, "chart.png"),
                               f"mpilaunch vs baselines, {meta['date']}, {meta['machine']['cores']} cores"
                               + (" (SMOKE)" if opts.smoke else ""))
        if chart is None:
            log("chart.png not drawn: matplotlib is not installed (pip install matplotlib)")
    text = R.render_markdown(meta, sections, notes, chart)
    with open(os.path.join(out, "REPORT.md"), "w") as fh:
        fh.write(text)
    log(f"wrote {os.path.join(out, 'REPORT.md')}" + (f" and {chart}" if chart else "")
        + f" ({meta['duration_s']:.0f} s of measuring)")
    return 0


def _python_start() -> dict:
    """Median CPU of an empty interpreter start, with and without site (and the clean one)."""
    import statistics
    out = {}
    cands = [("python -c pass", [C.PY, "-c", "pass"]), ("python -S -c pass", [C.PY, "-S", "-c", "pass"])]
    if C.CLEAN_PY:
        cands.append(("clean-site python -c pass", [C.CLEAN_PY, "-c", "pass"]))
    for name, argv in cands:
        runs = [C.timed_run(argv) for _ in range(7)]
        out[name] = {"wall": statistics.median(r.wall for r in runs), "cpu": statistics.median(r.cpu for r in runs)}
    return out


def _skipped_for_budget(name):
    return {"key": name, "title": TITLES[name], "method": [], "tables": [], "chart": None, "profile": [],
            "notes": [f"Skipped: the smoke run's time budget ({SMOKE_BUDGET_S} s) would be exceeded."],
            "verdicts": [{"figure": TITLES[name], "value": "skipped (smoke budget)", "target": "—", "met": None}],
            "raw": {}}


def _jsonable(x):
    if hasattr(x, "__dict__"):
        return x.__dict__
    return str(x)


if __name__ == "__main__":
    sys.exit(main())
