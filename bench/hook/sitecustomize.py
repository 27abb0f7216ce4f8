"""Bench-only process accounting hook (active only when BENCH_PROC_LOG is set).

Put this directory first on PYTHONPATH: every Python process started with that environment
(the mpilaunch front-end, each rank adapter, each worker, the scheduler) appends one JSON
line to $BENCH_PROC_LOG at exit: pid, ppid, argv, wall-clock time at interpreter start
(/proc/self/stat starttime) and at this module's import and at exit, and its own CPU time
(resource.getrusage(RUSAGE_SELF): all threads of the process, children excluded), and what
it can see of its parent at that moment (argv, start time, CPU so far in 10 ms ticks): the
rank adapter starts with ``python -S``, where this hook is not loaded, so its start time is
learnt from its worker's record. One O_APPEND write per process, so lines from concurrent
processes do not interleave.
"""
import os

_LOG = os.environ.get("BENCH_PROC_LOG")
if _LOG:
    import atexit
    import resource
    import sys
    import time

    _T_IMPORT = time.time()

    def _start_time():
        """Wall-clock time at which this process was created (fork), from /proc."""
        try:
            with open("/proc/self/stat") as fh:
                ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
            age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
            return _T_IMPORT - age
        except (OSError, ValueError, IndexError):
            return None

    _T_START = _start_time()

    def _parent():
        """The parent as seen at this process's exit (it may run with -S, where this hook
        cannot record it itself): its argv, start time and CPU so far (10 ms ticks)."""
        ppid = os.getppid()
        try:
            with open(f"/proc/{ppid}/cmdline", "rb") as fh:
                argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
            with open(f"/proc/{ppid}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            tck = os.sysconf("SC_CLK_TCK")
            age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(f[19]) / tck
            return {"parent_argv": argv, "parent_start": time.time() - age,
                    "parent_cpu_so_far": (int(f[11]) + int(f[12])) / tck}
        except (OSError, ValueError, IndexError):
            return {}

    def _record():
        t_exit = time.time()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        import json  # after the measurement: the hook's own cost stays out of the figures
        parent = _parent()
        rec = {"pid": os.getpid(), "ppid": os.getppid(), "argv": [sys.executable] + sys.argv,
               "ms_role": os.environ.get("MS_ROLE"),
               "t_start": _T_START, "t_site": _T_IMPORT, "t_exit": t_exit,
               "utime": ru.ru_utime, "stime": ru.ru_stime,
               "child_utime": ch.ru_utime, "child_stime": ch.ru_stime, **parent}
        try:
            fd = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, (json.dumps(rec) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass

    atexit.register(_record)
