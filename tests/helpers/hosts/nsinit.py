"""Runs as a script (``python3 nsinit.py --hostname H -- sshd argv...``) inside a new
host's fresh UTS + mount namespaces: set the hostname, mount a private tmpfs on /run
(so the host has its own /run/sshd), then exec sshd.  It execs (no fork), so the pid
the caller started is sshd's pid.  Standard library only; imports nothing of ours."""
import os
import socket
import subprocess
import sys


def nsinit(hostname, argv):
    socket.sethostname(hostname)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=16m",
                    "mpilaunch-run", "/run"], check=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    os.chmod("/run/sshd", 0o755)
    os.execv(argv[0], argv)


def main(args):
    if len(args) < 3 or args[0] != "--hostname":
        sys.exit("usage: nsinit.py --hostname NAME [--] ARGV...")
    rest = args[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        sys.exit("nsinit.py: no command to exec")
    nsinit(args[1], rest)


if __name__ == "__main__":
    main(sys.argv[1:])
