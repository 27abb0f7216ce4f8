"""Hostfile parsing: both dialects, -H lists, VC_WORKER_HOSTS, and every error names file:line."""
import pytest

from mpilaunch.config import hostfile as hf
from mpilaunch.errors import UsageError

from helpers import REPO


def test_openmpi_format_with_comments_and_blank_lines(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# cluster\n\nnode-a slots=8 max_slots=16\nnode-b slots=8  # rack 2\n10.0.0.3\n")
    assert hf.read_hostfile(str(path)) == [
        hf.Host("node-a", 8, 16), hf.Host("node-b", 8, None), hf.Host("10.0.0.3", 1, None),
    ]


def test_mpich_format():
    assert hf.parse_text("a:4\nb:2\n", "f") == [hf.Host("a", 4), hf.Host("b", 2)]


def test_host_list_and_vc_worker_hosts():
    assert hf.parse_host_list("a:2,b") == [hf.Host("a", 2), hf.Host("b", 1)]
    assert hf.hosts_from_vc_worker_hosts("w0,w1,w2", 8) == [hf.Host("w0", 8), hf.Host("w1", 8), hf.Host("w2", 8)]


def test_render_normalised_hostfile():
    assert hf.render_hostfile([hf.Host("a", 2), hf.Host("b", 4, 8)]) == "a slots=2\nb slots=4 max_slots=8\n"


@pytest.mark.parametrize("text, message", [
    ("a slots=4\na slots=2\n", "f:2: host 'a' is listed twice (first at f:1)"),
    ("a slots=0\n", "f:1: slots must be at least 1, got 0"),
    ("a slots=-3\n", "f:1: slots must be at least 1, got -3"),
    ("a slots=four\n", "f:1: slots must be a whole number, got 'four'"),
    ("\na slots=2 max_slots=1\n", "f:2: max_slots=1 is smaller than slots=2"),
    ("a colour=red\n", "f:1: unknown hostfile key 'colour' (expected slots=, max_slots= or port=)"),
    ("a 4\n", "f:1: expected key=value after the host name, got '4'"),
    ("a:0\n", "f:1: slot count must be at least 1, got 0"),
    ("a:2 b\n", "f:1: unexpected 'b' after 'a:2'"),
    ("bad;host\n", "f:1: 'bad;host' is not a valid host name"),
    ("# only a comment\n", "f: the hostfile lists no hosts"),
])
def test_errors_name_file_and_line(text, message):
    with pytest.raises(UsageError) as err:
        hf.parse_text(text, "f")
    assert str(err.value) == message


def test_missing_file_error(tmp_path):
    with pytest.raises(UsageError, match=r"hostfile .*/nope: no such file"):
        hf.read_hostfile(str(tmp_path / "nope"))


def test_host_list_errors():
    with pytest.raises(UsageError, match=r"^-H item 2: host 'a' is listed twice"):
        hf.parse_host_list("a:1,a:2")
    with pytest.raises(UsageError, match=r"^-H item 2: empty host name"):
        hf.parse_host_list("a,,b")


def test_example_hostfiles_in_the_repository_parse():
    import os
    root = os.path.join(REPO, "hostfiles")
    parsed = {name: hf.read_hostfile(os.path.join(root, name)) for name in sorted(os.listdir(root))}
    assert parsed == {
        "localhost": [hf.Host("localhost", 4)],
        "one-node": [hf.Host("node-0", 8)],
        "two-nodes": [hf.Host("node-0", 8), hf.Host("node-1", 8)],
        "two-nodes.mpich": [hf.Host("node-0", 8), hf.Host("node-1", 8)],
    }


# ---------------------------------------------------------------- a port per host, IPv6 literals

def test_ports_in_every_form():
    assert hf.parse_text("a slots=2 port=2201\na slots=2 port=2202\nb:3@2203\nc\n", "f") == [
        hf.Host("a", 2, None, 2201), hf.Host("a", 2, None, 2202), hf.Host("b", 3, None, 2203),
        hf.Host("c", 1)]
    assert hf.parse_host_list("a:2@2201,a@2202,b") == [
        hf.Host("a", 2, None, 2201), hf.Host("a", 1, None, 2202), hf.Host("b", 1)]
    assert hf.hosts_from_vc_worker_hosts("w0@2201,w0@2202", 4) == [
        hf.Host("w0", 4, None, 2201), hf.Host("w0", 4, None, 2202)]


def test_ipv6_literals_bare_or_bracketed_kept_bare():
    assert hf.parse_text("fd00::1 slots=2 port=22\n[fd00::2]:3@2201\n[fd00::3]\n", "f") == [
        hf.Host("fd00::1", 2, None, 22), hf.Host("fd00::2", 3, None, 2201), hf.Host("fd00::3", 1)]
    assert hf.parse_host_list("fd00::1,[fd00::2]:2") == [hf.Host("fd00::1", 1), hf.Host("fd00::2", 2)]


def test_labels_name_address_and_port():
    assert [hf.label(h) for h in hf.parse_text("a port=1\nfd00::1 port=2\nb\n", "f")] == [
        "a:1", "[fd00::1]:2", "b"]


@pytest.mark.parametrize("text, message", [
    ("a slots=1 port=70000\n", "f:1: ssh port '70000' is not a port between 1 and 65535"),
    ("a slots=1 port=0\n", "f:1: ssh port '0' is not a port between 1 and 65535"),
    ("a:2@ssh\n", "f:1: ssh port 'ssh' is not a port between 1 and 65535"),
    ("a port=2201\na port=2201\n", "f:2: host 'a:2201' is listed twice (first at f:1)"),
    ("fe80::1%eth0 slots=2\n", "f:1: 'fe80::1%eth0': an IPv6 address with a zone index (%...) "
                               "names a link of one machine only; give a global or ULA (fd00::/8) address"),
    ("[fe80::1%eth0]:2\n", "f:1: '[fe80::1%eth0]': an IPv6 address with a zone index (%...) "
                           "names a link of one machine only; give a global or ULA (fd00::/8) address"),
    ("fd00::1::2\n", "f:1: 'fd00::1::2' is not a valid IPv6 address"),
])
def test_port_and_ipv6_errors(text, message):
    with pytest.raises(UsageError) as err:
        hf.parse_text(text, "f")
    assert str(err.value) == message


def _cli(tmp_path, hostfile_text, *args, env=None):
    import os
    import subprocess
    import sys

    hosts = tmp_path / "hosts"
    hosts.write_text(hostfile_text)
    script = tmp_path / "started.py"
    marker = tmp_path / "started"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    run_env.update(env or {})
    p = subprocess.run([sys.executable, "-m", "mpilaunch", "--hostfile", str(hosts), *args, str(script)],
                       cwd=REPO, env=run_env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert not marker.exists()
    return p


@pytest.mark.parametrize("text, args, env, message", [
    ("10.231.9.1 slots=1 port=65536\n", (), {},
     "ssh port '65536' is not a port between 1 and 65535"),
    ("10.231.9.1 slots=1 port=2201\n10.231.9.2 slots=1\n", ("--launcher", "srun"), {},
     "10.231.9.1:2201: an ssh port on a Slurm-allocated host list; inside a Slurm job the ranks "
     "are started through srun, not ssh: drop the port"),
    ("10.231.9.1 slots=1 port=2201\n", (), {"SLURM_JOB_ID": "7"},
     "10.231.9.1:2201: an ssh port on a Slurm-allocated host list"),
    ("fe80::1%eth0 slots=1\n", (), {}, "an IPv6 address with a zone index (%...)"),
    ("10.231.9.1 slots=1 port=2201\n", ("--ssh-args", "-p 22"), {},
     "ssh ports in the host list and -p in --ssh-args"),
])
def test_bad_network_input_is_one_line_exit_2(tmp_path, text, args, env, message):
    p = _cli(tmp_path, text, *args, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpilaunch: error: ") and message in lines[0], p.stderr


def test_a_discovery_scripts_lines_take_the_same_forms():
    from mpilaunch.attempts import discovery

    assert discovery.parse("10.0.0.5:2@2201\n10.0.0.5:2@2202\n[fd00::1]:1\nb\n", "/d.sh") == (
        hf.Host("10.0.0.5", 2, None, 2201), hf.Host("10.0.0.5", 2, None, 2202),
        hf.Host("fd00::1", 1), hf.Host("b", 1))
    with pytest.raises(discovery.DiscoveryError, match=r"host 10.0.0.5:2201 listed twice"):
        discovery.parse("10.0.0.5@2201\n10.0.0.5:3@2201\n", "/d.sh")
