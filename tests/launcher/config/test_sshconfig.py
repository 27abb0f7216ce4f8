"""The job's ssh configuration (mpilaunch/config/sshconfig.py): aliases, the file, the MPI's ssh
options, and the refusals. Pure."""
from collections import namedtuple

import pytest

from mpilaunch.config import sshconfig
from mpilaunch.config.hostfile import Host, render_hostfile
from mpilaunch.errors import UsageError

Cfg = namedtuple("Cfg", "hosts ssh_port ssh_extra")
SHARED = (Host("10.0.0.5", 2, None, 2201), Host("10.0.0.5", 2, None, 2202), Host("node3.example", 1))


def test_aliases_only_for_entries_with_a_port():
    assert [sshconfig.alias(h) for h in SHARED] == [
        "port2201-10-0-0-5", "port2202-10-0-0-5", "node3.example"]
    assert sshconfig.alias(Host("fd00::1", 1, None, 22)) == "port22-fd00--1"
    assert render_hostfile(SHARED) == ("port2201-10-0-0-5 slots=2\nport2202-10-0-0-5 slots=2\n"
                                       "node3.example slots=1\n")


def test_the_file_with_the_users_own_config_included_last():
    cfg = Cfg(SHARED, 2222, ("-F", "/etc/cluster/ssh_config", "-o", "User=ai"))
    path, text = sshconfig.job_file(cfg, "/tmp/run", home="/home/u")
    assert path == "/tmp/run/ssh_config"
    assert text == (
        "# The ssh configuration of one mpilaunch job: a Host alias per hostfile entry\n"
        "# (mpilaunch/config/sshconfig.py). Removed with the job's run directory.\n"
        "Host port2201-10-0-0-5\n    HostName 10.0.0.5\n    Port 2201\n"
        "Host port2202-10-0-0-5\n    HostName 10.0.0.5\n    Port 2202\n"
        "Host node3.example\n    HostName node3.example\n    Port 2222\n"
        "Match final\nMatch all\n    Include /etc/cluster/ssh_config\n")
    assert sshconfig.mpi_ssh_args(cfg, "/tmp/run") == ["-F", "/tmp/run/ssh_config", "-o", "User=ai"]


def test_without_the_users_config_ssh_defaults_are_included():
    _, text = sshconfig.job_file(Cfg(SHARED[:1], None, ()), "/r", home="/home/u")
    assert text.endswith("Host port2201-10-0-0-5\n    HostName 10.0.0.5\n    Port 2201\n"
                         "Match final\nMatch all\n    Include /home/u/.ssh/config\n"
                         "    Include /etc/ssh/ssh_config\n")


def test_no_port_anywhere_no_file_and_the_old_options():
    cfg = Cfg((Host("a", 1), Host("b", 1)), 2222, ("-F", "x"))
    assert sshconfig.job_file(cfg, "/r") is None
    assert sshconfig.mpi_ssh_args(cfg, "/r") == ["-p", "2222", "-F", "x"]


def test_port_of_own_then_global():
    assert [sshconfig.port_of(h, 2222) for h in SHARED] == [2201, 2202, 2222]
    assert sshconfig.port_of(Host("a"), None) is None


def test_split_user_config_takes_the_last_F():
    assert sshconfig.split_user_config(["-Fa", "-o", "X=1", "-F", "b"]) == ("b", ["-o", "X=1"])


@pytest.mark.parametrize("hosts, kw, message", [
    ((Host("a", 1, None, 22),), dict(ssh_in_mca=True),
     "f: a:22: ssh ports in the host list and plm_rsh_args in the MCA/extra args; give the ssh "
     "options with --ssh-args instead"),
    ((Host("a", 1, None, 22), Host("port22-a", 1)), {},
     "f: host 'port22-a' is also the alias of a port 22; rename the host"),
])
def test_validate(hosts, kw, message):
    args = dict(extra=(), starter="mpirun", in_slurm=False, ssh_in_mca=False)
    args.update(kw)
    with pytest.raises(UsageError) as err:
        sshconfig.validate(hosts, "f", **args)
    assert str(err.value) == message


def test_ipv6_literals_get_an_alias_without_colons():
    """Open MPI 4.1 refuses a colon in a node name and Hydra's host:N splits at one."""
    hosts = (Host("fd00:231::11", 1), Host("fd00:231::12", 1))
    assert sshconfig.needed(hosts) and [sshconfig.alias(h) for h in hosts] == [
        "ipv6-fd00-231--11", "ipv6-fd00-231--12"]
    assert not sshconfig.needed((Host("10.0.0.1"), Host("node-b")))


def test_direct_options_without_the_jobs_file():
    cfg = Cfg(SHARED, 2222, ("-F", "/etc/cluster/ssh_config", "-o", "User=ai"))
    job = sshconfig.job_file(cfg, "/tmp/run", home="/home/u")
    extra = sshconfig.mpi_ssh_args(cfg, "/tmp/run")
    assert sshconfig.direct(job, extra) == (
        ["-F", "/etc/cluster/ssh_config", "-o", "User=ai"],
        {"port2201-10-0-0-5": 2201, "port2202-10-0-0-5": 2202, "node3.example": 2222})
    assert sshconfig.direct(None, ["-p", "22"]) == (["-p", "22"], {})
