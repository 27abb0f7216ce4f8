"""``python3 -S reaper.py PIDFILE ARGV...``: the parent of one test ``slurmd``.

It sets ``PR_SET_CHILD_SUBREAPER`` on itself, starts ``ARGV`` (slurmd) as its child, writes
that child's pid to ``PIDFILE``, forwards SIGTERM/SIGINT/SIGHUP to it, and reaps every
process that ends below it until none is left, then exits with slurmd's status.

Why: slurmd double-forks each ``slurmstepd``, which is then re-parented to the nearest
subreaper. When that was slurmd itself (it never ``wait``s for what it did not fork) or the
test process, every ended ``slurmstepd`` stayed a zombie. Here they are re-parented to this
process and collected at once, and the fixture finds every live job process as a descendant
of this pid (``cluster.descendants``). Standard library only: it may run inside a test host's
namespaces (``nsenter ... python3 -S reaper.py``)."""
import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(args):
    if len(args) < 2:
        sys.exit("usage: reaper.py PIDFILE ARGV...")
    pidfile, argv = args[0], args[1:]
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("reaper.py: prctl(PR_SET_CHILD_SUBREAPER) failed")
    child = os.fork()
    if child == 0:
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    with open(pidfile + ".tmp", "w") as f:
        f.write("%d\n" % child)
    os.rename(pidfile + ".tmp", pidfile)

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = 0
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main(sys.argv[1:])
