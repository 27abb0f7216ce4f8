"""Run one command as rank 0's tailed worker under mpilaunch's real supervisor, without
mpirun: ``python supervise_one.py LOG_PATH [--no-tail] -- ARGV...``. The supervisor's
console output goes to this process's stdout (the caller points it at /dev/null or a file).
Isolates the adapter's relay (pipe -> log file + "[rank0] " prefixed console) from mpirun's
own output forwarding."""
import os
import socket
import sys

from mpilaunch.rank.plan import ChildSpec
from mpilaunch.rank.supervisor import Supervisor


def main(argv):
    i = argv.index("--")
    opts, cmd = argv[:i], argv[i + 1:]
    log_path = opts[0]
    tail = None if "--no-tail" in opts else b"[rank0] "
    spec = ChildSpec(role="worker", argv=cmd, env=dict(os.environ), log_path=log_path,
                     tail_prefix=tail)
    return Supervisor([spec], 0, socket.gethostname()).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
