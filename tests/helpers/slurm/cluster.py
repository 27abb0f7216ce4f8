"""A real Slurm 22.05 (Debian ``slurm-wlm``) on this machine, without systemd.

``munged`` with a generated key, ``slurmctld`` and one ``slurmd`` started by hand in the
foreground (``-D``) from a small ``slurm.conf`` whose state, spool, log and socket paths all
live under one temp dir, on ports chosen free at start. Slurm's client commands find it
through ``SLURM_CONF`` (:meth:`SlurmCluster.env`).

Only PIDs this module started are ever signalled: the daemons, and what ``slurmd``
started. Each ``slurmd`` runs as the child of a small subreaper (reaper.py), so the
``slurmstepd`` processes it double-forks, and the job's tasks, are re-parented to the reaper
instead of init: teardown finds them through ``/proc`` ppid links from the reaper, and every
ended ``slurmstepd`` is reaped at once (no zombies left after teardown).

Accounting: ``sacct`` needs ``slurmdbd`` and a MariaDB, far over the CI budget; job end states
come from ``jobcomp/filetxt`` (one ``JobId=.. JobState=FAILED .. ExitCode=3:0`` line per job,
written by slurmctld) and from ``scontrol show job`` (kept ``MinJobAge`` seconds).
"""
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from ..ports import free_port

PR_SET_CHILD_SUBREAPER = 36
SBIN = "/usr/sbin"
DAEMONS = ("munged", "slurmctld", "slurmd")
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
PYTHON3 = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def missing_prereqs():
    """Why a Slurm cluster cannot be started here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their user)"
    for name in DAEMONS:
        if not os.access(os.path.join(SBIN, name), os.X_OK):
            return "%s not installed (bash scripts/setup_slurm.sh)" % name
    for name in ("srun", "sbatch", "salloc", "scancel", "scontrol", "sinfo"):
        if not shutil.which(name):
            return "%s not installed (bash scripts/setup_slurm.sh)" % name
    return None


def render_conf(d, nodes, cpus, ctld_port, slurmd_port, kill_wait=5, ctld=None,
                munge_socket=None, tmp_fs=None):
    """slurm.conf text: the nodes ``[(name, addr)]`` with ``cpus`` CPUs each
    (``config_overrides``: more task slots than cores is fine for tests), the controller
    ``ctld = (name, addr)`` (default: the first node's name at 127.0.0.1), everything under the
    directory ``d`` but the munge socket (default ``d/munge.socket``) and ``TmpFS`` (where the
    pmix plugin makes its per-step dirs; default /tmp)."""
    ctld = ctld or (nodes[0][0], "127.0.0.1")
    names = ",".join(n for n, _ in nodes)
    return "\n".join([
        "ClusterName=mpltest",
        "SlurmctldHost=%s(%s)" % ctld,
        "SlurmctldPort=%d" % ctld_port,
        "SlurmdPort=%d" % slurmd_port,
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "AuthInfo=socket=%s" % (munge_socket or d + "/munge.socket"),
        "StateSaveLocation=%s/state" % d,
        "SlurmdSpoolDir=%s/spool-%%n" % d,
        "SlurmctldPidFile=%s/slurmctld.pid" % d,
        "SlurmdPidFile=%s/slurmd-%%n.pid" % d,
        "SlurmctldLogFile=%s/slurmctld.log" % d,
        "SlurmdLogFile=%s/slurmd-%%n.log" % d,
        "SlurmdParameters=config_overrides",
        "TmpFS=%s" % (tmp_fs or "/tmp"),
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/builtin",
        "JobCompType=jobcomp/filetxt",
        "JobCompLoc=%s/jobcomp.txt" % d,
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "KillWait=%d" % kill_wait,          # SIGTERM -> SIGKILL at scancel / time limit
        "MinJobAge=600",                    # scontrol show job keeps ended jobs this long
        "InactiveLimit=0",
        "MessageTimeout=10",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
    ] + ["NodeName=%s NodeAddr=%s CPUs=%d State=UNKNOWN" % (n, a, cpus) for n, a in nodes] + [
        "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
        % names,
        "",
    ])


def _children_map():
    """ppid -> [(pid, state)] of every process."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    return kids


def descendants(pid):
    """Live descendants of pid (zombies skipped: one may be seen before its reaper ran)."""
    kids, out, todo, seen = _children_map(), [], [pid], set()
    while todo:
        for c, state in kids.get(todo.pop(), ()):
            if c not in seen:
                seen.add(c)
                todo.append(c)
                if state != "Z":
                    out.append(c)
    return out


class SlurmCluster:
    """One controller + one compute node (this machine, NodeName = this hostname)."""
    __test__ = False

    def __init__(self, cpus=4, kill_wait=5, base=None):
        self.dir = tempfile.mkdtemp(prefix="mpl-slurm-", dir=base)
        os.chmod(self.dir, 0o755)   # munged refuses group/world-writable parents
        self.node = socket.gethostname().split(".")[0]
        self.cpus = cpus
        self.kill_wait = kill_wait
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.procs = {}             # name -> Popen (only what we started)
        self.slurmd_pidfiles = {}   # node -> file where its reaper wrote slurmd's pid

    # -- environment for clients ----------------------------------------------------
    def env(self, base=None, **extra):
        env = dict(os.environ if base is None else base)
        for k in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))]:
            del env[k]
        env["SLURM_CONF"] = self.conf
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def run(self, argv, timeout=60, env=None, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(list(argv), env=env or self.env(), timeout=timeout, text=True, **kw)

    # -- start / stop ---------------------------------------------------------------
    def start(self, timeout=30):
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name, argv, log_name=None, **kw):
        log = open(os.path.join(self.dir, (log_name or name) + ".out"), "ab")
        try:
            self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, env=self.env(),
                                                start_new_session=True, **kw)
        finally:
            log.close()

    def _write_key(self):
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        return key

    def _spawn_munged(self, name, key, socket_path, enter=()):
        """munged in the foreground; ``enter``: an argv prefix (nsenter into a test host)."""
        d, tag = self.dir, name.replace("@", "-")
        self._spawn(name, list(enter) + [
            os.path.join(SBIN, "munged"), "-F", "--force", "--key-file", key,
            "--socket", socket_path, "--pid-file", os.path.join(d, tag + ".pid"),
            "--log-file", os.path.join(d, tag + ".log"),
            "--seed-file", os.path.join(d, tag + ".seed")], log_name=tag)

    def _spawn_slurmd(self, node, enter=()):
        """slurmd -D for ``node`` as the child of reaper.py (its pid in slurmd@node.pid)."""
        os.makedirs(os.path.join(self.dir, "spool-%s" % node), mode=0o755, exist_ok=True)
        pidfile = os.path.join(self.dir, "reaped-slurmd-%s.pid" % node)
        self._spawn("slurmd@" + node, list(enter) + [
            PYTHON3, "-S", REAPER, pidfile, os.path.join(SBIN, "slurmd"), "-D", "-f", self.conf,
            "-N", node], log_name="slurmd-" + node)
        self.slurmd_pidfiles[node] = pidfile

    def _start(self, timeout):
        d = self.dir
        os.makedirs(os.path.join(d, "state"), mode=0o755, exist_ok=True)
        key = self._write_key()
        self.munge_socket = os.path.join(d, "munge.socket")
        with open(self.conf, "w") as f:
            f.write(render_conf(d, [(self.node, "127.0.0.1")], self.cpus, int(free_port()),
                                int(free_port()), self.kill_wait))
        self._spawn_munged("munged", key, self.munge_socket)
        self._wait(lambda: os.path.exists(self.munge_socket), timeout, "munged socket")
        self._spawn("slurmctld", [os.path.join(SBIN, "slurmctld"), "-D", "-i", "-f", self.conf])
        self._spawn_slurmd(self.node)
        self._wait(lambda: self._nodes_idle([self.node]), timeout,
                   "node %s idle in sinfo" % self.node)

    def _nodes_idle(self, nodes):
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10).stdout
        return all(re.search(r"^%s idle\b" % re.escape(n), out, re.M) for n in nodes)

    def _wait(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError("%s exited %s while waiting for %s:\n%s" % (
                        name, p.returncode, what, self.logs()))
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                if cond():
                    return
            time.sleep(0.2)
        raise RuntimeError("timed out waiting for %s:\n%s" % (what, self.logs()))

    def logs(self, n=15):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith((".log", ".out")) and not name.startswith("job-"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out.append("== %s\n%s" % (name, "".join(f.readlines()[-n:])))
        return "\n".join(out)

    def daemons(self):
        """One line per daemon we started: running, or how it ended (for a failure's text)."""
        return "\n".join("%s pid %d: %s" % (name, p.pid, "running" if p.poll() is None
                                             else "exited %s" % p.returncode)
                         for name, p in sorted(self.procs.items()))

    def slurmd_pid(self, node):
        """The pid of ``node``'s slurmd (written by its reaper), or None."""
        try:
            with open(self.slurmd_pidfiles[node]) as f:
                return int(f.read())
        except (KeyError, OSError, ValueError):
            return None

    def job_pids(self, node=None):
        """Live processes the slurmd of ``node`` (default: every node) started: slurmstepd
        and the tasks below it (descendants of its reaper, slurmd itself excepted)."""
        out = []
        for name, p in self.procs.items():
            if not name.startswith("slurmd@") or (node and name != "slurmd@" + node):
                continue
            if p.poll() is None:
                main = self.slurmd_pid(name[len("slurmd@"):])
                out += [pid for pid in descendants(p.pid) if pid != main]
        return out

    def zombies(self):
        """Zombie processes whose parent is one of our reapers or slurmds (should be none)."""
        ours = {p.pid for n, p in self.procs.items() if n.startswith("slurmd@")}
        ours |= {self.slurmd_pid(n[len("slurmd@"):]) for n in self.procs if n.startswith("slurmd@")}
        kids = _children_map()
        return [c for parent in ours for c, state in kids.get(parent, ()) if state == "Z"]

    def stop(self):
        """Cancel every job, then stop our daemons and what slurmd started; remove the dir."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self.run(["scancel", "--full", "--quiet", "--user", "root"], timeout=10)
        left = self.job_pids()
        deadline = time.monotonic() + self.kill_wait + 5
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self.job_pids()
        order = sorted(self.procs, key=lambda n: (not n.startswith("slurmd@"),
                                                  n.startswith("munged")))
        for name in order:
            p = self.procs[name]
            if p.poll() is not None:
                continue
            # a reaper forwards SIGTERM to its slurmd, then exits once all below it ended
            extra = descendants(p.pid) if name.startswith("slurmd@") else []
            for pid in [p.pid] + extra:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                for pid in descendants(p.pid) + [p.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                p.wait(5)
        self.procs.clear()
        self._cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _cleanup(self):
        """What a subclass created besides the dir (nothing here)."""

    # -- jobs -----------------------------------------------------------------------
    def sbatch(self, script, opts=(), env=None, wait=True, timeout=180):
        """Submit the shell text ``script`` (``sbatch --parsable``); -> (job id, the job's exit
        status when ``wait`` else None, output file path). Waiting polls squeue every 0.2 s
        instead of ``sbatch --wait``, which polls at up to 10 s (a 1.5 s job took 10 s)."""
        self._n = getattr(self, "_n", 0) + 1
        path = os.path.join(self.dir, "job-%d.sh" % self._n)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + script)
        out = os.path.join(self.dir, "job-%d.out" % self._n)
        r = self.run(["sbatch", "--parsable", "--output", out] + list(opts) + [path], env=env,
                     timeout=60)
        job = r.stdout.strip().split(";")[0] if r.returncode == 0 else None
        if not job:
            raise RuntimeError("sbatch failed (%d): %s\n%s\n%s" % (
                r.returncode, r.stderr, self.daemons(), self.logs()))
        if not wait:
            return job, None, out
        if not self.wait_gone(job, timeout):
            raise RuntimeError("job %s still in squeue after %ss:\n%s" % (job, timeout,
                                                                        self.logs()))
        code = self.job_record(job)[1] or "255:0"
        status, sig = (int(x) for x in code.split(":"))
        return job, (128 + sig if sig else status), out

    def wait_gone(self, job_id, timeout=60):
        """Wait until the job has left squeue; True if it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], timeout=10)
            if out.returncode != 0 or not out.stdout.strip():
                return True
            time.sleep(0.2)
        return False

    # -- job results ----------------------------------------------------------------
    def job_record(self, job_id):
        """(JobState, ExitCode) from ``scontrol show job`` (e.g. ``("FAILED", "3:0")``)."""
        out = self.run(["scontrol", "show", "job", str(job_id)], timeout=10).stdout
        state = re.search(r"\bJobState=(\S+)", out)
        code = re.search(r"\bExitCode=(\S+)", out)
        return (state.group(1) if state else None, code.group(1) if code else None)

    def jobcomp(self, job_id):
        """The jobcomp/filetxt record of a job as a dict (JobState, ExitCode, ...), or {}."""
        path = os.path.join(self.dir, "jobcomp.txt")
        if not os.path.exists(path):
            return {}
        with open(path) as f:
            for line in f:
                fields = dict(x.split("=", 1) for x in line.split() if "=" in x)
                if fields.get("JobId") == str(job_id):
                    return fields
        return {}
