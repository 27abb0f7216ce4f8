"""A real multi-node Slurm over the namespace test hosts (tests/helpers/hosts/, the ``testhosts``
fixture): one ``slurmd`` per test host, ``slurmctld`` and the client commands on the root side.

* Node ``i`` is test host ``i``: NodeName = its hostname (``<prefix>-host<i>``, its own UTS
  namespace), NodeAddr = its 10.231.0.x address. Its ``munged`` and ``slurmd`` (under
  reaper.py) run inside the host's network, UTS and mount namespaces (``nsenter -t <its sshd>
  -n -u -m``), so the job's tasks see that hostname and address.
* ``slurmctld`` and a ``munged`` for it and for the clients (sbatch, scontrol, ...) run in the
  root namespace; SlurmctldHost = this machine's name at the bridge address the test-host set
  gives the root namespace (the one address the hosts can reach).
* munge: one generated key for all; every munged listens at the same path
  ``/run/mpl-slurm-<id>/munge.socket`` (slurm.conf has one ``AuthInfo``), which is a different
  socket in each host since each has a private ``/run`` (tmpfs). That directory is created in
  the root ``/run`` and in each host's, and removed at teardown.
* ``TmpFS`` is that private ``/run`` directory too: srun's pmix plugin makes
  ``<TmpFS>/spmix_appdir_<uid>_<job>.<step>`` on every node, and with the shared /tmp the
  second node found the first one's ("File exists": the step never started).
* Everything else (conf, state, spool, logs, the key) is in one temp dir under /tmp, which the
  hosts share with the root side.

Only PIDs started here are signalled (cluster.SlurmCluster.stop); the test hosts themselves
belong to the ``testhosts`` fixture."""
import os
import shutil
import socket
import subprocess

from .cluster import SBIN, SlurmCluster, render_conf
from ..ports import free_port


class SlurmNodes(SlurmCluster):
    """slurmctld here + one slurmd in each of the first ``n`` test hosts."""
    __test__ = False

    def __init__(self, testhosts, n=2, cpus=2, kill_wait=5):
        super().__init__(cpus=cpus, kill_wait=kill_wait)
        self.th = testhosts
        self.hosts = testhosts.hosts[:n]
        self.sshd_pids = [h.sshd_pid for h in self.hosts]      # whose namespaces we entered
        self.nodes = [h.hostname for h in self.hosts]
        self.node = self.nodes[0]
        self.run_dir = "/run/" + os.path.basename(self.dir)     # private per test host
        self.made_run_dirs = []                                 # (None = root ns, or host)
        self.cgroup_mounts = []                                 # hosts we mounted it in

    def enter(self, host):
        """argv prefix that runs a command inside the test host's namespaces (those of its
        sshd when this cluster started)."""
        pid = self.sshd_pids[self.hosts.index(host)]
        return ["nsenter", "-t", str(pid), "-n", "-u", "-m", "--"]

    def _mkdir_run(self, host=None):
        argv = ["mkdir", "-m", "0755", "-p", self.run_dir]
        subprocess.run((self.enter(host) if host else []) + argv, check=True, timeout=30)
        self.made_run_dirs.append(host)

    def _mount_cgroup(self, host):
        """slurmd 22.05 refuses to start without a filesystem on /sys/fs/cgroup (it detects
        the cgroup version even under proctrack/linuxproc + task/none); a test host's /sys is a
        fresh sysfs (``ip netns exec`` remounts it), so mount a tmpfs there (read as cgroup
        v1, which then has nothing to do)."""
        r = subprocess.run(self.enter(host) + ["mountpoint", "-q", "/sys/fs/cgroup"], timeout=30)
        if r.returncode != 0:
            subprocess.run(self.enter(host) + ["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m",
                                               "mpl-slurm-cgroup", "/sys/fs/cgroup"],
                           check=True, timeout=30)
            self.cgroup_mounts.append(host)
            # cgroup/v1 checks that its "systemd" hierarchy is a cgroup fs, nothing more
            # (measured): the same named hierarchy the root side has, mounted again here
            subprocess.run(self.enter(host) + ["mkdir", "/sys/fs/cgroup/systemd"], check=True,
                           timeout=30)
            subprocess.run(self.enter(host) + ["mount", "-t", "cgroup", "-o", "none,name=systemd",
                                               "mpl-slurm-cgroup", "/sys/fs/cgroup/systemd"],
                           check=True, timeout=30)

    def _start(self, timeout):
        d = self.dir
        os.makedirs(os.path.join(d, "state"), mode=0o755, exist_ok=True)
        key = self._write_key()
        self.munge_socket = os.path.join(self.run_dir, "munge.socket")
        ctld = (socket.gethostname().split(".")[0], self.th.bridge_addr)
        with open(self.conf, "w") as f:
            f.write(render_conf(d, [(h.hostname, h.addr) for h in self.hosts], self.cpus,
                                int(free_port()), int(free_port()), self.kill_wait, ctld=ctld,
                                munge_socket=self.munge_socket, tmp_fs=self.run_dir))
        self._mkdir_run()
        self._spawn_munged("munged", key, self.munge_socket)
        for h in self.hosts:
            self._mkdir_run(h)
            self._spawn_munged("munged@" + h.hostname, key, self.munge_socket, self.enter(h))
        self._wait(self._munge_sockets, timeout, "the munged sockets")
        self._spawn("slurmctld", [os.path.join(SBIN, "slurmctld"), "-D", "-i", "-f", self.conf])
        for h in self.hosts:
            self._mount_cgroup(h)
            self._spawn_slurmd(h.hostname, self.enter(h))
        self._wait(lambda: self._nodes_idle(self.nodes), timeout,
                   "nodes %s idle in sinfo" % ",".join(self.nodes))

    def _munge_sockets(self):
        if not os.path.exists(self.munge_socket):
            return False
        for h in self.hosts:
            r = subprocess.run(self.enter(h) + ["test", "-S", self.munge_socket], timeout=30)
            if r.returncode != 0:
                return False
        return True

    def _cleanup(self):
        for host in self.made_run_dirs:
            if host is None:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            else:
                subprocess.run(self.enter(host) + ["rm", "-rf", "--one-file-system",
                                                   self.run_dir],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        self.made_run_dirs = []
        for host in self.cgroup_mounts:
            subprocess.run(self.enter(host) + ["umount", "-R", "/sys/fs/cgroup"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        self.cgroup_mounts = []

    def healthy(self):
        """Every daemon we started still runs, in the test host it was started in (a fault
        test's crash kills them; a restored host has a new sshd and namespaces)."""
        return (all(p.poll() is None for p in self.procs.values())
                and all(h.sshd_pid == pid for h, pid in zip(self.hosts, self.sshd_pids)))

    # -- per node ---------------------------------------------------------------------
    def host_of(self, node):
        return next(h for h in self.hosts if h.hostname == node)

    def netns_pids(self, node):
        """Every pid inside the node's network namespace (``ip netns pids``)."""
        r = subprocess.run(["ip", "netns", "pids", self.host_of(node).netns],
                           capture_output=True, text=True, timeout=30)
        return [int(x) for x in r.stdout.split() if x.isdigit()]
