"""Process scans for tests that must prove nothing is left behind. Tests only kill what they
started: the psutil.Process objects they captured (descendants of their own child)."""
import time

import psutil


def descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(procs):
    """Those of ``procs`` (psutil.Process objects) still running and not zombies."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def pid_alive(pid: int) -> bool:
    """Is process ``pid`` running (a zombie counts as gone)?"""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(procs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = alive(procs)
        if not left:
            return []
        time.sleep(0.1)
    return alive(procs)


def kill_all(procs):
    for p in alive(procs):
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def with_arg(marker):
    """Every process on this machine (namespace hosts included) with ``marker`` in an argument."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in a for a in p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


def kill_leftovers(procs):
    """Kill each of ``procs`` (captured during the run), ignoring those already gone."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def wait_for(predicate, timeout=20.0, interval=0.05):
    """Poll ``predicate`` until it is truthy or ``timeout`` passed; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def adapter_of_rank(procs, rank):
    """The rank adapter (the ``python -S .../rank/_boot.py`` process) among ``procs`` whose
    environment gives it rank ``rank`` (Open MPI's, Hydra's or Slurm's variable), or None."""
    for p in procs:
        try:
            if not any(a.endswith("/rank/_boot.py") for a in p.cmdline()):
                continue
            env = p.environ()
        except psutil.Error:
            continue
        if any(env.get(name) == str(rank) for name in RANK_VARS):
            return p
    return None


def watch_to_end(proc, timeout=240, kill_seen=False):
    """Wait for the launcher ``proc`` (a Popen with pipes) to end, collecting every process it
    started on the way (they are gone by the end, so they are looked at while it runs); killed
    after ``timeout`` s, and the processes seen with it when ``kill_seen`` (else they are left
    for the test to find). -> (returncode, stdout, stderr, the processes seen)."""
    kids, t0 = [], time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() - t0 < timeout:
            try:
                kids += [c for c in psutil.Process(proc.pid).children(recursive=True)
                         if c not in kids]
            except psutil.Error:
                pass
            time.sleep(0.1)
        stdout, stderr = proc.communicate(timeout=max(1, timeout - (time.monotonic() - t0)))
    finally:
        if proc.poll() is None:
            if kill_seen:
                kill_leftovers(kids)
            proc.kill()
            proc.wait()
    return proc.returncode, stdout, stderr, kids
