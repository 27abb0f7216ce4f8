"""msrun baselines: what MindSpore's own launcher costs on this machine.

(a) ``time_init_only``: wall time of one msrun job whose workers only call ``init()``
    (``examples/ms_train.py --init-only``), from spawning msrun to msrun's exit.
(b) ``time_kill_teardown``: a training job (``--sleep-per-step 1 --steps 60``); when worker
    rank 1 has written step ``kill_at_step`` we snapshot msrun's descendants (psutil), SIGKILL
    that worker, and measure until msrun has exited AND none of the snapshotted processes
    remains (zombies count as gone). Also records msrun's exit code and when each process went.

Usage (numbers go to docs/measurements-msrun.md)::

    python bench/msrun_baseline.py --runs 5 --which init
    python bench/msrun_baseline.py --runs 3 --which kill --json bench/out/msrun_kill.json

Library use (the benchmark suite reuses these)::

    from msrun_baseline import msrun_argv, time_init_only, time_kill_teardown, summarize
    r = time_init_only(msrun_argv(port=18130, log_dir="/tmp/x/logs",
                                  script_args=["--init-only"]))

Notes: msrun starts ``python`` from PATH (not its own interpreter), so ``msrun_env()`` puts
msrun's bin dir first on PATH. It needs psutil (present in the MindSpore venv and in the
main interpreter); it does not import mindspore itself, so any Python 3.9+ can run it.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MS_TRAIN = os.path.join(REPO, "examples", "ms_train.py")
DEFAULT_VENV = os.environ.get("MPILAUNCH_MS_VENV", "/opt/mpilaunch/ms-venv")
DEFAULT_MSRUN = os.path.join(DEFAULT_VENV, "bin", "msrun")


def msrun_argv(msrun=DEFAULT_MSRUN, worker_num=2, local_worker_num=None, port=18130,
               log_dir="msrun_logs", script=MS_TRAIN, script_args=(), join=True, extra=()):
    """The msrun command line for one single-node job."""
    return [msrun, f"--worker_num={worker_num}",
            f"--local_worker_num={local_worker_num or worker_num}",
            f"--master_port={port}", f"--log_dir={log_dir}", f"--join={bool(join)}",
            *extra, script, *script_args]


def msrun_env(msrun=DEFAULT_MSRUN, base=None):
    """Environment for msrun: its bin dir first on PATH (msrun runs ``python`` from PATH)."""
    env = dict(os.environ if base is None else base)
    for k in [k for k in env if k.startswith("MS_") or k in ("RANK_ID", "RANK_SIZE", "DEVICE_ID")]:
        del env[k]  # a stray MS_ROLE etc. from the caller would confuse msrun's children
    bindir = os.path.dirname(os.path.abspath(msrun))
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def _log_dir_of(argv):
    for a in argv:
        if a.startswith("--log_dir="):
            return a.split("=", 1)[1]
    return None


def _alive(proc):
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _describe(proc):
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        env = {}
    try:
        cmd = proc.cmdline()
    except (psutil.Error, OSError):
        cmd = []
    role = env.get("MS_ROLE")
    if cmd and os.path.basename(cmd[0]) == "tail":  # msrun's `tail -f worker_N.log` (join)
        name, role = "tail:" + os.path.basename(cmd[-1]), None
    elif role == "MS_WORKER":
        name = f"worker_{env.get('MS_NODE_ID', '?')}"
    elif role == "MS_SCHED":
        name = "scheduler"
    else:
        name = os.path.basename(cmd[0]) if cmd else "?"
    return {"pid": proc.pid, "name": name, "role": role, "node_id": env.get("MS_NODE_ID")}


def _kill_leftovers(procs):
    """SIGKILL, by PID, the processes this run started that are still alive."""
    for p in procs:
        if _alive(p):
            try:
                p.kill()
            except psutil.Error:
                pass


def _count_in_logs(log_dir, marker):
    n = 0
    if log_dir and os.path.isdir(log_dir):
        for name in os.listdir(log_dir):
            if name.startswith("worker_") and name.endswith(".log"):
                with open(os.path.join(log_dir, name), errors="replace") as fh:
                    n += fh.read().count(marker)
    return n


def time_init_only(argv, env=None, cwd=None, timeout=300.0, console=None):
    """Run one msrun job (argv from msrun_argv(..., script_args=["--init-only"])).

    Returns {"wall": s, "rc": msrun exit code, "init_ok": MS_INIT_OK lines in worker logs,
    "timed_out": bool, "exited": {process name: seconds after start when it was seen gone}}. msrun's console output goes to ``console`` (a path) or is discarded.
    """
    env = msrun_env(argv[0]) if env is None else env
    out = open(console, "w") if console else subprocess.DEVNULL
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid)
    seen, names, exited = {}, {}, {}
    timed_out = False
    try:
        while True:
            running = proc.poll() is None
            now = time.monotonic()
            if running:
                try:
                    for c in ps.children(recursive=True):
                        seen.setdefault(c.pid, c)
                except psutil.Error:
                    pass
            for pid, p in seen.items():
                if pid in exited:
                    continue
                if _alive(p):
                    # re-read while alive: a fresh child may not have exec'd yet
                    name = _describe(p)["name"]
                    if name != "?":
                        names[pid] = name
                else:
                    exited[pid] = now - t0
            if not running:
                break
            if now - t0 > timeout:
                timed_out = True
                proc.kill()
                break
            time.sleep(0.05)
        proc.wait()
        wall = time.monotonic() - t0
    finally:
        if console:
            out.close()
        _kill_leftovers(seen.values())
    return {"wall": wall, "rc": proc.returncode,
            "init_ok": _count_in_logs(_log_dir_of(argv), "MS_INIT_OK"), "timed_out": timed_out,
            "exited": {f"{names.get(pid, '?')}[{pid}]": t for pid, t in exited.items()}}


def _steps_written(path):
    try:
        with open(path) as fh:
            return sum(1 for line in fh if line.endswith("\n"))
    except OSError:
        return 0


def time_kill_teardown(argv, out_dir, kill_rank=1, kill_at_step=5, env=None, cwd=None,
                       timeout=300.0, console=None):
    """Run a training job, SIGKILL worker ``kill_rank`` after it wrote step ``kill_at_step``.

    ``argv``: msrun_argv(..., script_args=["--steps", "60", "--sleep-per-step", "1",
    "--out", out_dir]). Returns {"start_to_kill", "teardown" (SIGKILL -> msrun exited and no
    snapshotted process left), "msrun_exit_after_kill", "rc", "gone": {name: seconds after
    the kill}, "leftover": [names still alive at timeout, then killed], "timed_out"}.
    """
    env = msrun_env(argv[0]) if env is None else env
    params = os.path.join(out_dir, f"params_rank{kill_rank}.jsonl")
    out = open(console, "w") if console else subprocess.DEVNULL
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid)
    seen = {}
    result = {"rc": None, "timed_out": False, "leftover": [], "gone": {}}
    try:
        # 1. wait for the victim to reach the step
        while _steps_written(params) < kill_at_step:
            try:
                for c in ps.children(recursive=True):
                    seen.setdefault(c.pid, c)
            except psutil.Error:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"msrun exited (rc={proc.returncode}) before rank {kill_rank} "
                                   f"reached step {kill_at_step}")
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"rank {kill_rank} did not reach step {kill_at_step} in {timeout}s")
            time.sleep(0.05)
        # 2. snapshot msrun's descendants, find the victim
        snapshot = {c.pid: c for c in ps.children(recursive=True)}
        seen.update(snapshot)
        names = {pid: _describe(p)["name"] for pid, p in snapshot.items()}
        victim = [p for pid, p in snapshot.items() if names[pid] == f"worker_{kill_rank}"]
        if len(victim) != 1:
            raise RuntimeError(f"cannot identify worker_{kill_rank} among {sorted(names.values())}")
        # 3. kill and watch
        t_kill = time.monotonic()
        victim[0].send_signal(signal.SIGKILL)
        result["start_to_kill"] = t_kill - t0
        result["processes"] = sorted(names.values())
        pending = dict(snapshot)
        t_msrun = None
        while True:
            now = time.monotonic()
            if t_msrun is None and proc.poll() is not None:
                t_msrun = now
                result["msrun_exit_after_kill"] = now - t_kill
            for pid in [pid for pid, p in pending.items() if not _alive(p)]:
                result["gone"][names[pid]] = now - t_kill
                del pending[pid]
            if t_msrun is not None and not pending:
                result["teardown"] = now - t_kill
                break
            if now - t_kill > timeout:
                result["timed_out"] = True
                result["leftover"] = sorted(names[pid] for pid in pending)
                break
            time.sleep(0.02)
        if t_msrun is None:
            proc.kill()
        proc.wait()
        result["rc"] = proc.returncode
    finally:
        if console:
            out.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_leftovers(seen.values())
    return result


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": statistics.median(values),
            "min": min(values), "max": max(values)}


def main(argv=None):
    ap = argparse.ArgumentParser(description="Measure msrun baselines (init-only wall time, "
                                             "teardown after SIGKILL of a worker).")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--which", choices=("init", "kill", "both"), default="both")
    ap.add_argument("--msrun", default=DEFAULT_MSRUN)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--port-base", type=int, default=18130,
                    help="run i uses port-base + i (init) / port-base + 50 + i (kill)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--kill-at-step", type=int, default=5)
    ap.add_argument("--kill-rank", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--work-dir", default=None, help="logs go here (default: a temp dir, removed)")
    ap.add_argument("--json", default=None, help="also write all results to this file")
    a = ap.parse_args(argv)

    work = a.work_dir or tempfile.mkdtemp(prefix="msrun_baseline_")
    report = {"msrun": a.msrun, "workers": a.workers}
    try:
        if a.which in ("init", "both"):
            runs = []
            for i in range(a.runs):
                d = os.path.join(work, f"init{i}")
                os.makedirs(d, exist_ok=True)
                argv_i = msrun_argv(a.msrun, a.workers, port=a.port_base + i,
                                    log_dir=os.path.join(d, "logs"), script_args=["--init-only"])
                r = time_init_only(argv_i, cwd=d, timeout=a.timeout,
                                   console=os.path.join(d, "msrun.out"))
                runs.append(r)
                ex = ", ".join(f"{k} {v:.1f}s" for k, v in sorted(r["exited"].items(), key=lambda kv: kv[1]))
                print(f"init-only run {i + 1}/{a.runs}: wall={r['wall']:.2f}s rc={r['rc']} "
                      f"MS_INIT_OK={r['init_ok']}/{a.workers} exited: {ex}", flush=True)
            s = summarize([r["wall"] for r in runs if r["rc"] == 0 and not r["timed_out"]])
            report["init_only"] = {"command": " ".join(argv_i), "runs": runs, "wall": s}
            if s["n"]:
                print(f"INIT_ONLY wall median={s['median']:.2f}s min={s['min']:.2f}s "
                      f"max={s['max']:.2f}s (n={s['n']})", flush=True)
        if a.which in ("kill", "both"):
            runs = []
            for i in range(a.runs):
                d = os.path.join(work, f"kill{i}")
                os.makedirs(d, exist_ok=True)
                out_dir = os.path.join(d, "out")
                argv_i = msrun_argv(a.msrun, a.workers, port=a.port_base + 50 + i,
                                    log_dir=os.path.join(d, "logs"),
                                    script_args=["--steps", str(a.steps), "--sleep-per-step", "1",
                                                 "--out", out_dir])
                try:
                    r = time_kill_teardown(argv_i, out_dir, kill_rank=a.kill_rank,
                                           kill_at_step=a.kill_at_step, cwd=d, timeout=a.timeout,
                                           console=os.path.join(d, "msrun.out"))
                except RuntimeError as exc:
                    print(f"kill run {i + 1}/{a.runs}: FAILED: {exc}", flush=True)
                    runs.append({"error": str(exc), "timed_out": True, "rc": None})
                    continue
                runs.append(r)
                gone = ", ".join(f"{k} {v:.1f}s" for k, v in sorted(r["gone"].items(), key=lambda kv: kv[1]))
                print(f"kill run {i + 1}/{a.runs}: teardown={r.get('teardown', float('nan')):.2f}s "
                      f"msrun_exit={r.get('msrun_exit_after_kill', float('nan')):.2f}s rc={r['rc']} "
                      f"gone: {gone}" + (f" LEFTOVER {r['leftover']}" if r["leftover"] else ""),
                      flush=True)
            s = summarize([r.get("teardown") for r in runs if not r["timed_out"]])
            report["kill_teardown"] = {"command": " ".join(argv_i), "runs": runs, "teardown": s,
                                       "rcs": sorted({r["rc"] for r in runs})}
            if s["n"]:
                print(f"KILL_TEARDOWN median={s['median']:.2f}s min={s['min']:.2f}s "
                      f"max={s['max']:.2f}s (n={s['n']}) msrun rc={report['kill_teardown']['rcs']}",
                      flush=True)
    finally:
        if a.json:
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "w") as fh:
                json.dump(report, fh, indent=1, default=str)
        if not a.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
