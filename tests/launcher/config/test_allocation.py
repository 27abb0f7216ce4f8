"""Allocation discovery (mpilaunch/config/allocation.py) with the variables and files exactly as the
schedulers and operators write them, and its place in config (an explicit hostfile, -H or
VC_WORKER_HOSTS still wins; --dry-run names the source).

Sources of the shapes below (cited from knowledge of the projects, not fetched here):
- Slurm's sbatch/srun man pages, "OUTPUT ENVIRONMENT VARIABLES": SLURM_JOB_ID,
  SLURM_JOB_NODELIST (compressed, e.g. ``node[01-04,07]``), SLURM_TASKS_PER_NODE
  ("2(x3),1": counts in node-list order), SLURM_NTASKS, SLURM_JOB_CPUS_PER_NODE.
- Kubeflow mpi-operator (github.com/kubeflow/mpi-operator, v2beta1 controller): the launcher
  pod gets OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile; the hostfile has one
  ``<job>-worker-<i>.<job>-worker.<namespace>.svc slots=<slotsPerWorker>`` line per worker
  (Intel MPI / MPICH: I_MPI_HYDRA_HOST_FILE / HYDRA_HOST_FILE and ``host:N`` lines).
- Volcano (github.com/volcano-sh/volcano, job plugins ``svc`` and ``mpi``): the svc plugin
  mounts /etc/volcano/<task>.host (one host a line) and sets VC_<TASK>_HOSTS (comma list,
  task name upper-cased, '-' -> '_') and VC_<TASK>_NUM; the mpi plugin sets MPI_HOST on the
  master (comma list of the worker hosts). Its example job names the tasks mpimaster and
  mpiworker.
"""
import argparse
import os
import subprocess
import sys

import pytest

from mpilaunch.config import allocation as al
from mpilaunch.config import launchconfig, options
from mpilaunch.errors import UsageError
from mpilaunch.config.hostfile import Host

from helpers import REPO


def slurm_env(**kw):
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-04,07]",
           "SLURM_TASKS_PER_NODE": "2(x3),1,4", "SLURM_NTASKS": "11"}
    env.update(kw)
    return {k: v for k, v in env.items() if v is not None}


# -- Slurm ------------------------------------------------------------------------------
def test_slurm_nodelist_and_tasks_per_node():
    a = al.slurm(slurm_env())
    assert a.hosts == (Host("node01", 2), Host("node02", 2), Host("node03", 2),
                       Host("node04", 1), Host("node07", 4))
    assert a.kind == al.SLURM and a.job_id == "4242"
    assert a.source == ("Slurm job 4242 (SLURM_JOB_NODELIST=node[01-04,07], "
                        "SLURM_TASKS_PER_NODE=2(x3),1,4)")


@pytest.mark.parametrize("env, job", [
    ({"SLURM_JOB_ID": "7", "SLURM_JOBID": "8"}, "7"),
    ({"SLURM_JOBID": "8"}, "8"),      # the older name alone
    ({"SLURM_JOB_ID": "", "SLURM_JOBID": ""}, None),
    ({}, None),
])
def test_the_slurm_job_id_is_read_in_one_place(env, job):
    assert al.slurm_job_id(env) == job
    assert al.in_slurm(env) is (job is not None)
    assert (al.slurm(dict(env, SLURM_JOB_NODELIST="vm")) or al.Allocation((), "", "")).job_id == job


@pytest.mark.parametrize("nodelist, names", [
    ("a[1-2]-ib,b3", ["a1-ib", "a2-ib", "b3"]),
    ("vm", ["vm"]),
    ("node[001-003]", ["node001", "node002", "node003"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("c[9-11],d01", ["c9", "c10", "c11", "d01"]),
])
def test_compressed_host_lists(nodelist, names):
    assert al.expand_nodelist(nodelist) == names


def test_slurm_fallbacks_cpus_per_node_then_one_per_node():
    a = al.slurm(slurm_env(SLURM_JOB_NODELIST="n[1-2]", SLURM_TASKS_PER_NODE=None,
                           SLURM_NTASKS=None, SLURM_JOB_CPUS_PER_NODE="8(x2)"))
    assert a.hosts == (Host("n1", 8), Host("n2", 8))
    a = al.slurm({"SLURM_JOB_ID": "1", "SLURM_NODELIST": "n[1-2]"})
    assert a.hosts == (Host("n1", 1), Host("n2", 1)) and "1 task per node" in a.source


@pytest.mark.parametrize("env, message", [
    (slurm_env(SLURM_TASKS_PER_NODE="2(x2)"), "gives 2 node(s) but SLURM_JOB_NODELIST="),
    (slurm_env(SLURM_NTASKS="12"), "SLURM_NTASKS=12 but SLURM_TASKS_PER_NODE="),
    (slurm_env(SLURM_TASKS_PER_NODE="2(x)"), "not in Slurm's '2(x3),1' form"),
    (slurm_env(SLURM_TASKS_PER_NODE="0(x5)"), "not in Slurm's '2(x3),1' form"),
    (slurm_env(SLURM_JOB_NODELIST="node[3-1]"), "not a Slurm host list"),
    (slurm_env(SLURM_JOB_NODELIST=None), "SLURM_JOB_NODELIST is not set"),
    (slurm_env(SLURM_JOB_NODELIST="x;rm,y", SLURM_TASKS_PER_NODE="1(x2)", SLURM_NTASKS="2"),
     "not a valid host name"),
])
def test_slurm_errors_name_the_variable(env, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        al.slurm(env)


def test_no_slurm_outside_a_job():
    assert al.slurm({"SLURM_CONF": "/etc/slurm/slurm.conf"}) is None


# -- Kubeflow mpi-operator ----------------------------------------------------------------
def test_mpi_operator_openmpi_hostfile(tmp_path):
    hostfile = tmp_path / "hostfile"   # stands for /etc/mpi/hostfile
    hostfile.write_text("pi-worker-0.pi-worker.default.svc slots=2\n"
                        "pi-worker-1.pi-worker.default.svc slots=2\n")
    env = {"OMPI_MCA_orte_default_hostfile": str(hostfile),
           "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
           "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10"}
    a = al.discover(env, 1, volcano_root=str(tmp_path / "none"))
    assert a.kind == al.KUBEFLOW
    assert a.hosts == (Host("pi-worker-0.pi-worker.default.svc", 2),
                       Host("pi-worker-1.pi-worker.default.svc", 2))
    assert a.source == f"OMPI_MCA_orte_default_hostfile={hostfile}"


@pytest.mark.parametrize("var", ["I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE"])
def test_mpi_operator_intel_and_mpich_host_n_files(tmp_path, var):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("job-worker-0.job-worker.ns.svc:4\njob-worker-1.job-worker.ns.svc:4\n")
    a = al.discover({var: str(hostfile)}, 1, volcano_root=str(tmp_path / "none"))
    assert [h.slots for h in a.hosts] == [4, 4] and a.source.startswith(var + "=")


def test_mpi_operator_missing_hostfile_is_named(tmp_path):
    with pytest.raises(UsageError, match=r"hostfile .*/etc-mpi-hostfile: no such file"):
        al.kubeflow({"OMPI_MCA_orte_default_hostfile": str(tmp_path / "etc-mpi-hostfile")})


# -- Volcano ------------------------------------------------------------------------------
def test_volcano_mpi_plugin_mpi_host():
    a = al.volcano({"MPI_HOST": "lm-mpi-job-mpiworker-0.lm-mpi-job,lm-mpi-job-mpiworker-1.lm-mpi-job"},
                   2, root="/nonexistent")
    assert a.hosts == (Host("lm-mpi-job-mpiworker-0.lm-mpi-job", 2),
                       Host("lm-mpi-job-mpiworker-1.lm-mpi-job", 2))


def test_volcano_svc_plugin_variable_of_the_worker_task():
    env = {"VC_MPIMASTER_HOSTS": "job-mpimaster-0.job", "VC_MPIMASTER_NUM": "1",
           "VC_MPIWORKER_HOSTS": "job-mpiworker-0.job,job-mpiworker-1.job", "VC_MPIWORKER_NUM": "2"}
    a = al.volcano(env, 4, root="/nonexistent")
    assert a.hosts == (Host("job-mpiworker-0.job", 4), Host("job-mpiworker-1.job", 4))
    assert a.source == "VC_MPIWORKER_HOSTS"


def test_volcano_svc_plugin_host_file(tmp_path):
    (tmp_path / "mpimaster.host").write_text("job-mpimaster-0.job\n")
    (tmp_path / "mpiworker.host").write_text("job-mpiworker-0.job\njob-mpiworker-1.job\n")
    a = al.volcano({}, 1, root=str(tmp_path))
    assert [h.name for h in a.hosts] == ["job-mpiworker-0.job", "job-mpiworker-1.job"]
    assert a.source == str(tmp_path / "mpiworker.host")


def test_volcano_ambiguous_worker_tasks_are_refused(tmp_path):
    with pytest.raises(UsageError, match="several Volcano worker tasks"):
        al.volcano({"VC_AWORKER_HOSTS": "a", "VC_BWORKER_HOSTS": "b"}, 1, root=str(tmp_path))
    (tmp_path / "aworker.host").write_text("a\n")
    (tmp_path / "bworker.host").write_text("b\n")
    with pytest.raises(UsageError, match="several Volcano worker host files"):
        al.volcano({}, 1, root=str(tmp_path))


def test_nothing_found_is_none(tmp_path):
    assert al.discover({"PATH": "/bin"}, 1, volcano_root=str(tmp_path)) is None


def test_slurm_comes_before_operator_files(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("x slots=1\n")
    env = slurm_env(OMPI_MCA_orte_default_hostfile=str(hostfile))
    assert al.discover(env, 1, volcano_root=str(tmp_path)).kind == al.SLURM


# -- config: explicit hosts still win; the source is recorded ------------------------------
def _args(*argv):
    return options.parser(options.RUN).parse_args(list(argv) + ["x.py"])


def _build(env, *argv, tmp_path):
    script = tmp_path / "x.py"
    script.write_text("")
    args = _args(*argv)
    args.script = str(script)
    return launchconfig.build(args, env)


def test_config_takes_the_slurm_allocation(tmp_path):
    cfg = _build(slurm_env(SLURM_JOB_NODELIST="n[1-2]", SLURM_TASKS_PER_NODE="2(x2)",
                           SLURM_NTASKS="4"), tmp_path=tmp_path)
    assert cfg.hosts == (Host("n1", 2), Host("n2", 2)) and cfg.np == 4
    assert cfg.hosts_source.startswith("Slurm job 4242")


def test_config_explicit_hosts_win_over_the_allocation(tmp_path):
    env = slurm_env(SLURM_JOB_NODELIST="n[1-2]", SLURM_TASKS_PER_NODE="2(x2)", SLURM_NTASKS="4")
    assert _build(env, "-H", "a:3", tmp_path=tmp_path).hosts == (Host("a", 3),)
    hostfile = tmp_path / "hf"
    hostfile.write_text("b slots=2\n")
    assert _build(env, "--hostfile", str(hostfile), tmp_path=tmp_path).hosts == (Host("b", 2),)
    assert _build({**env, "VC_WORKER_HOSTS": "c,d"}, tmp_path=tmp_path).hosts == (
        Host("c", 1), Host("d", 1))


@pytest.mark.parametrize("argv, env, hosts_from", [
    (["-H", "a:2"], {}, "-H"),
    (["--hostfile", "HOSTFILE"], {}, "hostfile"),
    ([], {"OPENMPI_HOST_FILE_PATH": "HOSTFILE"}, "hostfile"),
    ([], {"VC_WORKER_HOSTS": "c,d"}, "vc_worker_hosts"),
    ([], slurm_env(SLURM_JOB_NODELIST="n[1-2]", SLURM_TASKS_PER_NODE="2(x2)", SLURM_NTASKS="4"),
     "slurm"),
    ([], {"OMPI_MCA_orte_default_hostfile": "HOSTFILE"}, "kubeflow"),
    ([], {"MPI_HOST": "w0,w1"}, "volcano"),
    ([], {}, "local"),
])
def test_hosts_from_says_where_the_hosts_came_from(tmp_path, monkeypatch, argv, env, hosts_from):
    """A field for decisions (Slurm or not), the display string only for messages."""
    # this machine's own /etc/volcano, if any, must not decide the "local" case
    monkeypatch.setattr(al.discover, "__defaults__", (str(tmp_path / "no-volcano"), os.listdir))
    hostfile = tmp_path / "hosts"
    hostfile.write_text("b slots=2\n")

    def fill(v):
        return str(hostfile) if v == "HOSTFILE" else v
    cfg = _build({k: fill(v) for k, v in env.items()}, *map(fill, argv), tmp_path=tmp_path)
    assert cfg.hosts_from == hosts_from and cfg.hosts_from in launchconfig.HOSTS_FROM
    assert al.from_slurm(cfg.hosts_from) == (hosts_from == "slurm")
    assert (al.node_addr_lookup(cfg.hosts_from, {}) is not None) == (hosts_from == "slurm")
    # the decision reads the field, whatever the display string says
    lookalike = cfg._replace(hosts_source="Slurm job 1 (made up)")
    assert al.from_slurm(lookalike.hosts_from) == (hosts_from == "slurm")


def test_dry_run_says_where_the_hosts_came_from(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OPENMPI_", "VC_"))}
    env.update(SLURM_JOB_ID="77", SLURM_JOB_NODELIST="vm", SLURM_TASKS_PER_NODE="2",
               SLURM_NTASKS="2")
    out = subprocess.run([sys.executable, "-m", "mpilaunch", "--dry-run", str(script)], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "# hosts: Slurm job 77 (SLURM_JOB_NODELIST=vm, SLURM_TASKS_PER_NODE=2)" in out.stdout
    assert "-np 2" in out.stdout


# -- why Slurm is ending the job (scontrol show job -o, as Slurm 22.05 prints it) ------------
@pytest.mark.parametrize("line, why", [
    ("JobId=3 JobName=j UserId=root(0) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) "
     "TimeLimit=00:01:00", "time limit reached (TimeLimit=00:01:00)"),
    ("JobId=1 JobState=CANCELLED Reason=None", "cancelled by the scheduler (scancel)"),
    ("JobId=4 JobState=NODE_FAIL Reason=NodeDown", "node lost (Reason=NodeDown)"),
    ("JobId=5 JobState=RUNNING Reason=None", None),
    # while the batch script runs (measured: after scancel, and at the time limit)
    ("JobId=1 JobState=COMPLETING Reason=None RunTime=00:00:01 TimeLimit=UNLIMITED",
     "cancelled by the scheduler (scancel)"),
    ("JobId=3 JobState=COMPLETING Reason=None RunTime=00:01:02 TimeLimit=00:01:00",
     "time limit reached (TimeLimit=00:01:00)"),
    ("JobId=3 JobState=COMPLETING Reason=None RunTime=1-00:00:00 TimeLimit=2-00:00:00",
     "cancelled by the scheduler (scancel)"),
    ("", None),
])
def test_slurm_stop_reason(line, why):
    assert al.slurm_stop_reason(line) == why


# -- rank 0's address inside a Slurm allocation: Slurm's NodeAddr, never a DNS lookup -------
NODE_LINE = ("NodeName=node-b Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 CPUTot=2 "
             "NodeAddr=10.231.0.12 NodeHostName=node-b Version=22.05.8 OS=Linux State=ALLOCATED")


def test_node_addrs_from_scontrol_show_node():
    text = NODE_LINE + "\nNodeName=node-c Arch=x86_64 NodeAddr=node-c State=IDLE\n"
    assert al.node_addrs(text) == {"node-b": "10.231.0.12", "node-c": "node-c"}


def test_slurm_node_addr_asks_scontrol_once_for_that_node(tmp_path):
    calls = []

    def run(argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, NODE_LINE + "\n", "")

    (tmp_path / "scontrol").write_text("#!/bin/sh\n")
    (tmp_path / "scontrol").chmod(0o755)
    env = {"PATH": str(tmp_path)}
    assert al.slurm_node_addr("node-b", env, run=run) == "10.231.0.12"
    assert calls == [[str(tmp_path / "scontrol"), "show", "node", "-o", "node-b"]]
    assert al.slurm_node_addr("node-b", {"PATH": str(tmp_path / "none")}, run=run) is None
    assert al.node_addr_lookup(launchconfig.FROM_H, env) is None
    assert al.node_addr_lookup(al.KUBEFLOW, env) is None
    assert al.node_addr_lookup(al.SLURM, env)("node-b") is None   # this scontrol prints nothing


def test_rank0_address_from_the_first_other_nodes_nodeaddr():
    from mpilaunch import net

    hosts = (Host("localhost", 2), Host("node-b", 2), Host("node-c", 2))
    asked = []

    def addr_of(table):
        return lambda name: asked.append(name) or table.get(name)

    # the route source towards node-b's NodeAddr (loopback here, so the output is exact)
    assert net.rank0_address(hosts, addr_of({"node-b": "127.0.0.2"})) == "127.0.0.1"
    assert asked == ["node-b"]          # only the first other node is asked about
    # NodeAddr not an address (Slurm's default: the name), or unknown: the ranks agree
    assert net.rank0_address(hosts, addr_of({"node-b": "node-b"})) is None
    assert net.rank0_address(hosts, addr_of({})) is None
    assert net.rank0_address(hosts) is None
    asked.clear()
    assert net.rank0_address(hosts[:1], addr_of({})) is None
    assert asked == []                  # one node: nothing to ask


def test_dry_run_in_a_two_node_allocation_shows_rank0_address(tmp_path):
    import socket

    script = tmp_path / "x.py"
    script.write_text("")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\necho 'NodeName=node-b NodeAddr=127.0.0.2 "
                                   "State=ALLOCATED'\n")
    (fake / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OPENMPI_", "VC_"))}
    env.update(SLURM_JOB_ID="77", SLURM_JOB_NODELIST=socket.gethostname() + ",node-b",
               SLURM_TASKS_PER_NODE="2(x2)", SLURM_NTASKS="4",
               PATH=str(fake) + os.pathsep + env.get("PATH", ""))
    out = subprocess.run([sys.executable, "-m", "mpilaunch", "--dry-run", str(script)], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--master-addr 127.0.0.1 " in out.stdout, out.stdout
    assert "--expect-ranks '4;exact;" in out.stdout, out.stdout
