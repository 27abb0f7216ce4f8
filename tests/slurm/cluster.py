"""A real Slurm 22.05 (Debian ``slurm-wlm``) on this machine, without systemd.

``munged`` with a generated key, ``slurmctld`` and one ``slurmd`` started by hand in the
foreground (``-D``) from a small ``slurm.conf`` whose state, spool, log and socket paths all
live under one temp dir, on ports chosen free at start. Slurm's client commands find it
through ``SLURM_CONF`` (:meth:`SlurmCluster.env`).

Only PIDs this module started are ever signalled: the three daemons, and what ``slurmd``
started. ``slurmd`` is exec'd with ``PR_SET_CHILD_SUBREAPER`` set (kept across ``execve``),
so the ``slurmstepd`` processes it double-forks, and the job's tasks, stay its descendants
instead of moving to init: teardown finds them through ``/proc`` ppid links from slurmd.

Accounting: ``sacct`` needs ``slurmdbd`` and a MariaDB, far over the CI budget; job end states
come from ``jobcomp/filetxt`` (one ``JobId=.. JobState=FAILED .. ExitCode=3:0`` line per job,
written by slurmctld) and from ``scontrol show job`` (kept ``MinJobAge`` seconds).
"""
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

PR_SET_CHILD_SUBREAPER = 36
SBIN = "/usr/sbin"
DAEMONS = ("munged", "slurmctld", "slurmd")


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_conf(d, node, cpus, ctld_port, slurmd_port, kill_wait=5):
    """slurm.conf text: one node ``node`` with ``cpus`` CPUs (``config_overrides``: more task
    slots than cores is fine for tests), everything under the directory ``d``."""
    return "\n".join([
        "ClusterName=mpltest",
        "SlurmctldHost=%s(127.0.0.1)" % node,
        "SlurmctldPort=%d" % ctld_port,
        "SlurmdPort=%d" % slurmd_port,
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "AuthInfo=socket=%s/munge.socket" % d,
        "StateSaveLocation=%s/state" % d,
        "SlurmdSpoolDir=%s/spool-%%n" % d,
        "SlurmctldPidFile=%s/slurmctld.pid" % d,
        "SlurmdPidFile=%s/slurmd-%%n.pid" % d,
        "SlurmctldLogFile=%s/slurmctld.log" % d,
        "SlurmdLogFile=%s/slurmd-%%n.log" % d,
        "SlurmdParameters=config_overrides",
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
        "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN" % (node, cpus),
        "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
        % node,
        "",
    ])


def _subreaper_then_new_group():
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


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
    """Live descendants of pid. Zombies are skipped: a slurmstepd that ended is re-parented
    to slurmd (the subreaper), which does not reap what it did not expect."""
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

    def _spawn(self, name, argv, **kw):
        log = open(os.path.join(self.dir, name + ".out"), "ab")
        try:
            self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, env=self.env(), **kw)
        finally:
            log.close()

    def _start(self, timeout):
        d = self.dir
        for sub in ("state", "spool-%s" % self.node):
            os.makedirs(os.path.join(d, sub), mode=0o755, exist_ok=True)
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        with open(self.conf, "w") as f:
            f.write(render_conf(d, self.node, self.cpus, free_port(), free_port(),
                                self.kill_wait))
        self.munge_socket = os.path.join(d, "munge.socket")
        self._spawn("munged", [os.path.join(SBIN, "munged"), "-F", "--force",
                               "--key-file", key, "--socket", self.munge_socket,
                               "--pid-file", os.path.join(d, "munged.pid"),
                               "--log-file", os.path.join(d, "munged.log"),
                               "--seed-file", os.path.join(d, "munged.seed")],
                    start_new_session=True)
        self._wait(lambda: os.path.exists(self.munge_socket), timeout, "munged socket")
        self._spawn("slurmctld", [os.path.join(SBIN, "slurmctld"), "-D", "-i", "-f", self.conf],
                    start_new_session=True)
        self._spawn("slurmd", [os.path.join(SBIN, "slurmd"), "-D", "-f", self.conf,
                               "-N", self.node], preexec_fn=_subreaper_then_new_group)
        self._wait(self._node_idle, timeout, "node %s idle in sinfo" % self.node)

    def _node_idle(self):
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10).stdout
        return bool(re.search(r"^%s idle\b" % re.escape(self.node), out, re.M))

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
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out.append("== %s\n%s" % (name, "".join(f.readlines()[-n:])))
        return "\n".join(out)

    def job_pids(self):
        """Live processes slurmd started (slurmstepd and the tasks below it)."""
        p = self.procs.get("slurmd")
        return [] if p is None or p.poll() is not None else descendants(p.pid)

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
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            extra = descendants(p.pid) if name == "slurmd" else []
            for pid in [p.pid] + extra:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            for pid in extra:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

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
            raise RuntimeError("sbatch failed (%d): %s" % (r.returncode, r.stderr))
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
