"""``mpilaunch check`` inside a Slurm job, the pure parts (mpilaunch/check/slurm.py): what
``scontrol show node -o`` says about a node and what the check makes of it. The real run is
tests/slurm/test_multinode.py::test_check_inside_the_allocation."""
from mpilaunch.config import hostfile as hf
from mpilaunch.check import slurm
from mpilaunch.check.results import FAIL, OK, Params, skip_rest

# scontrol show node -o (Slurm 22.05.8, the test cluster), shortened
SHOWN = ("NodeName=mlt-host1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 CPUTot=2 "
         "NodeAddr=10.231.0.11 State=ALLOCATED ThreadsPerCore=1 Partitions=debug\n"
         "NodeName=mlt-host2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 CPUTot=2 "
         "NodeAddr=10.231.0.12 State=ALLOCATED+DRAIN ThreadsPerCore=1 Partitions=debug "
         "Reason=mpltest [root@2026-11-30T19:40:01]\n")


def test_node_states_from_scontrol():
    states = slurm.node_states(SHOWN)
    assert states["mlt-host1"] == ("ALLOCATED", "")
    assert states["mlt-host2"] == ("ALLOCATED+DRAIN", "mpltest [root@2026-11-30T19:40:01]")


def test_node_problem():
    for ok in ("IDLE", "ALLOCATED", "MIXED", "ALLOCATED+COMPLETING", "MIXED+PLANNED"):
        assert slurm.node_problem(ok) is None, ok
    assert slurm.node_problem("IDLE*") == "not responding (its slurmd does not answer slurmctld)"
    assert slurm.node_problem("DOWN*+DRAIN").startswith("not responding")
    assert slurm.node_problem("ALLOCATED+DRAIN") == "drain"
    assert slurm.node_problem("DOWN") == "down"
    assert slurm.node_problem("IDLE+MAINT") == "maint"


def test_node_result_names_the_fix():
    states = slurm.node_states(SHOWN)
    assert slurm.node_result(hf.Host("mlt-host1", 2), states).status == OK
    bad = slurm.node_result(hf.Host("mlt-host2", 2), states)
    assert bad.status == FAIL and "sbatch --exclude=mlt-host2" in bad.message
    assert slurm.node_result(hf.Host("elsewhere", 1), states).status == FAIL


def test_slots_message_speaks_slurm():
    p = Params(hosts=(hf.Host("a", 2), hf.Host("b", 2)), np=5, hosts_source="Slurm job 7 (...)")
    r = slurm.slots_result(p)
    assert r.status == FAIL and "4 task slot(s) of Slurm job 7" in r.message
    assert "--ntasks-per-node" in r.message and "hostfile" not in r.message


def test_srun_argv_and_the_ssh_path_untouched():
    assert slurm.srun_argv("/usr/bin/srun", "n1", ["true"]) == [
        "/usr/bin/srun", "--nodes=1", "--ntasks=1", "--nodelist=n1", "--overlap",
        "--kill-on-bad-exit=1", "--export=ALL", "--quiet", "true"]
    # the ssh path never lists the Slurm columns among what it skips
    assert [r.check for r in skip_rest("h", "", "ssh", "full")][:1] == ["python"]
