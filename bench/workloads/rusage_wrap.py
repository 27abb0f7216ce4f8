"""Run ARGV as a child and append its exact resource usage to OUT (one JSON line):
``python -S rusage_wrap.py OUT -- ARGV...``. ``os.wait4`` gives user+sys of the child and of
every descendant it reaped; the caller subtracts the descendants' own records (bench hook)
to get the child's own CPU. Used around the rank adapter, which runs with ``python -S``
where the hook cannot record it. Exits with the child's status; forwards SIGTERM/SIGINT."""
import json
import os
import signal
import sys


def main(argv):
    i = argv.index("--")
    out, cmd = argv[0], argv[i + 1:]
    pid = os.posix_spawn(cmd[0], cmd, os.environ)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda n, f: os.kill(pid, n))
    while True:
        try:
            _, status, ru = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    rec = {"pid": pid, "cpu": ru.ru_utime + ru.ru_stime, "utime": ru.ru_utime, "stime": ru.ru_stime,
           "status": os.waitstatus_to_exitcode(status), "argv": cmd}
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, (json.dumps(rec) + "\n").encode())
    os.close(fd)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
