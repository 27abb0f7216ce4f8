"""mpilaunch started inside test host 1's namespaces (the launcher as worker-0 on a platform),
one rank per host over the first hosts of ``testhosts``, and what a job left inside a host: for
the multi-host restart, shrink and discovery tests."""
import os
import subprocess
import sys

import psutil

from helpers import REPO
from helpers.launch import clean_env


def launch(th, mpirun, out, n_hosts, args, script_argv):
    """``mpilaunch ARGS SCRIPT_ARGV`` over an ``n_hosts`` hostfile, inside host 1; its stderr in
    ``out/launcher.err``, its stdout a pipe (``finish`` reads both)."""
    h1 = th.host(0)
    hf = th.hostfile(slots_per_host=1, n_hosts=n_hosts)
    cmd = ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns,
           sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "--hostfile", hf,
           "--ssh-args", f"-F {th.ssh_config}", "--no-scheduler", "--master_port", "0",
           "--log_dir", str(out / "logs"), *args, *script_argv]
    with open(out / "launcher.err", "w") as errf:
        return subprocess.Popen(cmd, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=errf, text=True)


def finish(proc, out, timeout):
    """Wait for the launch (its whole tree killed after ``timeout``: only what the test
    started); -> (exit status, stdout, stderr)."""
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            family = psutil.Process(proc.pid).children(recursive=True)
            proc.kill()
            for p in family:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            proc.wait()
    return proc.returncode, stdout, (out / "launcher.err").read_text()


def in_host(th, host):
    """Every live process inside the host's network namespace but its sshd listener
    (psutil.Process objects: a test may read their command line and environment)."""
    ino = os.stat(f"/run/netns/{th.host(host).netns}").st_ino
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        if p.pid == th.host(host).sshd_pid or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.stat(f"/proc/{p.pid}/ns/net").st_ino == ino:
                found.append(p)
        except OSError:
            pass
    return found
