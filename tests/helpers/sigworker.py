"""The worker the signal tests run in every rank (tests/e2e/test_signals.py, tests/slurm/
test_signals.py), and reading what it recorded.

``python sigworker.py OUT MODE STEPS`` with ``MODE``:

* ``handle``: a handler for SIGUSR1, SIGUSR2 and SIGCONT appends one line (its pid) to
  ``OUT/<SIGNAL>_<RANK>`` per delivery, and the worker keeps going;
* ``default``: no handler (a SIGUSR1 kills it, as under a bare launcher);
* ``save``: as ``handle``, and on SIGTERM it writes ``OUT/saving_<RANK>``, takes
  ``$SAVE_SECONDS`` (default 2) and writes ``OUT/saved_<RANK>``, then exits 143.

It writes ``OUT/up_<RANK>`` once its handlers are in place, then takes ``STEPS`` steps of
0.1 s of its own time (a stopped worker takes none), touching its heartbeat file
(``MPILAUNCH_HEARTBEAT_FILE``, when set) and appending a line to ``OUT/steps_<RANK>`` at each,
then ``OUT/done_<RANK>``, exit 0. ``STEPS`` 0: forever. With ``$END_AFTER`` (a signal name) it
also ends 1.5 s after its first delivery of that signal (a duplicate would arrive by then),
and at the first step after ``OUT/end`` exists;
``$STEPS_<N>`` overrides ``STEPS`` in the run Slurm numbers ``SLURM_RESTART_COUNT=N`` (a
requeued job); ``up_<RANK>`` gets one line per run (that number, or ``-``)."""
import os
import signal
import sys
import time

PATH = os.path.abspath(__file__)
NAMES = ("SIGUSR1", "SIGUSR2", "SIGCONT")


def main():
    out, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rank = os.environ.get("RANK", "x")
    steps = int(os.environ.get("STEPS_%s" % os.environ.get("SLURM_RESTART_COUNT", "0"), steps))
    end_after = os.environ.get("END_AFTER")
    first = {}

    def note(signum, frame):
        first.setdefault(signal.Signals(signum).name, time.monotonic())
        with open(os.path.join(out, "%s_%s" % (signal.Signals(signum).name, rank)), "a") as f:
            f.write("%d\n" % os.getpid())

    def save(signum, frame):
        open(os.path.join(out, "saving_%s" % rank), "w").close()
        time.sleep(float(os.environ.get("SAVE_SECONDS", "2")))
        open(os.path.join(out, "saved_%s" % rank), "w").close()
        os._exit(143)

    if mode in ("handle", "save"):
        for name in NAMES:
            signal.signal(getattr(signal, name), note)
    if mode == "save":
        signal.signal(signal.SIGTERM, save)
    with open(os.path.join(out, "up_%s" % rank), "a") as f:
        f.write("%s\n" % os.environ.get("SLURM_RESTART_COUNT", "-"))
    heartbeat = os.environ.get("MPILAUNCH_HEARTBEAT_FILE")
    done = 0
    while steps == 0 or done < steps:
        if end_after in first and time.monotonic() - first[end_after] > 1.5:
            break
        if os.path.exists(os.path.join(out, "end")):
            break
        time.sleep(0.1)
        done += 1
        with open(os.path.join(out, "steps_%s" % rank), "a") as f:
            f.write("%.3f\n" % time.time())
        if heartbeat:
            with open(heartbeat, "a"):
                os.utime(heartbeat)
    open(os.path.join(out, "done_%s" % rank), "w").close()


def count(out, name, rank):
    """How many times ``name`` (e.g. "SIGUSR1") reached rank ``rank``'s worker."""
    try:
        with open(os.path.join(str(out), "%s_%s" % (name, rank))) as f:
            return len(f.read().split())
    except FileNotFoundError:
        return 0


def counts(out, name, n):
    return [count(out, name, r) for r in range(n)]


def all_exist(out, prefix, n):
    return all(os.path.exists(os.path.join(str(out), "%s_%d" % (prefix, r))) for r in range(n))


def steps(out, rank):
    try:
        with open(os.path.join(str(out), "steps_%s" % rank)) as f:
            return len(f.read().split())
    except FileNotFoundError:
        return 0


def channel_peers(pid):
    """How many adapters the launcher ``pid`` has answered on its control channel: its
    established TCP connections on which it has sent something (its ``ok``, the first thing it
    sends; once that is out, every command it sends reaches that adapter:
    mpilaunch/supervise/control.py). Only a connection is not enough: an adapter the kernel has
    connected may still wait for its answer. Read with ``ss`` (bytes sent per socket, owner by
    pid) inside the process's own network namespace."""
    import re
    import subprocess

    argv = ["ss", "-tinpH", "state", "established"]
    try:
        if os.stat("/proc/%d/ns/net" % pid).st_ino != os.stat("/proc/self/ns/net").st_ino:
            argv = ["nsenter", "-t", str(pid), "-n", "--"] + argv
    except FileNotFoundError:
        return 0                            # it has ended: no one answered
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=30)
    if done.returncode != 0 and not os.path.exists("/proc/%d" % pid):
        return 0
    assert done.returncode == 0, (argv, done.stderr)
    listing = done.stdout
    owner, mine, answered = "pid=%d," % pid, False, 0
    for line in listing.splitlines():
        if not line[:1].isspace():          # a socket: addresses and owners
            mine = owner in line
        elif mine and re.search(r"\bbytes_sent:[1-9]", line):     # its TCP counters
            answered += 1
    return answered


if __name__ == "__main__":
    main()
