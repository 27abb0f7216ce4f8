"""Rank-side options checked by the launcher before mpirun starts: one line, exit 2, no rank
started, no log written (instead of mpirun's banner and one error per adapter after every rank
started, or a value accepted here and refused there). Each rule is the rank side's own
function: the last part of this file shows, rule by rule, that the launcher and the adapter
give the same answer."""
import os
import socket
import subprocess
from types import SimpleNamespace

import pytest

from helpers import REPO
from helpers.adapter import adapter_cmd, fake_rank_env, write_worker
from helpers.launch import run_cli
from helpers.ports import free_port
from mpilaunch import net
from mpilaunch.config import rankcheck
from mpilaunch.errors import UsageError
from mpilaunch.config.hostfile import Host
from mpilaunch.rank import agree, frameworkenv
from mpilaunch.rank.identity import read_identity


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("open('STARTED', 'w').close()\n")
    return str(path)


def _one_line(proc, tmp_path, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mpilaunch: error: ")
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "STARTED").exists()
    assert not (tmp_path / "logs").exists() or not os.listdir(tmp_path / "logs")


FIX_NAME = "give a file name such as worker_{rank}.log"


@pytest.mark.parametrize("opts, needles", [
    (["--bind_core", "garbage{"], ["--bind_core='garbage{': neither True/False nor JSON"]),
    (["--bind_core", '{"device0":["999"]}'], ["CPU 999 does not exist"]),
    (["--bind_core", "[1,2]"], ["--bind_core='[1,2]': the JSON is not a dict"]),
    (["--tail_worker_log", "99"], ["--tail_worker_log='99': rank 99 does not exist (the job has 2"]),
    (["--worker_log_name", "w_{foo}.log"], ["unknown placeholder {foo}"]),
    (["--worker_log_name", "sub/w_{rank}.log"], ["has a directory part", FIX_NAME]),
    (["--worker_log_name", "../escape_{rank}.log"], ["has a directory part"]),
    (["--worker_log_name", "/tmp/abs_{rank}.log"], ["an absolute path"]),
    (["--worker_log_name", "same.log"], ["has no {rank}, so the 2 ranks would write one file"]),
    (["--log_dir", "/sys/kernel"], ["--log_dir='/sys/kernel': in /proc or /sys"]),
    (["--log_dir", "/proc/logs"], ["in /proc or /sys"]),
    (["--visible-devices", ","], ["--visible-devices=',': has an empty entry"]),
    (["--master_addr", "no-such-host.invalid"], ["--master_addr='no-such-host.invalid': does not resolve"]),
    (["--master_addr", "192.0.2.1"], ["192.0.2.1 is not an address of rank 0's host"]),
])
def test_rank_option_refused_before_mpirun(tmp_path, script, opts, needles):
    proc, _ = run_cli(["-np", "2", "--master_port", free_port(), "--log_dir",
                       str(tmp_path / "logs"), *opts, script], tmp_path)
    _one_line(proc, tmp_path, *needles)


def test_log_dir_file_under_file_and_unwritable(tmp_path, script):
    f = tmp_path / "afile"
    f.write_text("x")
    for log_dir, needle in [(str(f), "an existing file, not a directory"),
                            (str(f / "sub"), "is a file, not a directory")]:
        proc, _ = run_cli(["-np", "2", "--master_port", free_port(), "--log_dir", log_dir,
                           script], tmp_path)
        _one_line(proc, tmp_path, f"--log_dir='{log_dir}'", needle)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        proc, _ = run_cli(["-np", "2", "--log_dir", str(ro), script], tmp_path)
        _one_line(proc, tmp_path, "not writable")


def test_single_rank_may_share_a_log_name_and_dry_run_checks_too(tmp_path, script):
    proc, _ = run_cli(["--dry-run", "-np", "1", "--worker_log_name", "same.log", script], tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc, _ = run_cli(["--dry-run", "-np", "2", "--tail_worker_log", "5", script], tmp_path)
    assert proc.returncode == 2 and "rank 5 does not exist" in proc.stderr


def test_port_in_use_on_rank0_host_starts_no_rank(tmp_path, script):
    # ranks 1..N used to start the user's script (worker logs created) before rank 0's port
    # check failed
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = str(s.getsockname()[1])
        proc, _ = run_cli(["-np", "2", "--master_port", port, "--log_dir", str(tmp_path / "logs"),
                           script], tmp_path)
    _one_line(proc, tmp_path, f"--master_port={port}: already in use on rank 0's host",
              "or 0 to pick a free one")


# --------------------------------------------------------------------------- one rule, both sides

def _refusal(fn, *args):
    with pytest.raises(UsageError) as err:
        fn(*args)
    return str(err.value)


def _adapter(tmp_path, *opts):
    """The adapter as a real process (one rank, no mpirun): (exit status, its error line)."""
    script, out = write_worker(tmp_path)
    cmd = adapter_cmd("--log-dir", str(tmp_path / "alogs"), "--master-port", free_port(),
                      "--no-scheduler", *opts, script=script)
    p = subprocess.run(cmd, env=fake_rank_env(T_DIR=out), cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    human = [line for line in p.stderr.splitlines() if not line.startswith("@@mpilaunch ")]
    return p.returncode, human


@pytest.mark.parametrize("value", [
    "1,,2", "0,1,", "0, ,1", ",", "",
])
def test_visible_devices_launcher_and_adapter_refuse_alike(tmp_path, script, value):
    """An empty entry is an error on both sides, in the same words (the launcher used to
    refuse '1,,2' while the adapter accepted it, and refuse '' with other words)."""
    why = _refusal(frameworkenv.parse_devices, value)
    assert why.startswith(f"--visible-devices={value!r}: ")
    proc, _ = run_cli(["--dry-run", "-np", "2", "--visible-devices", value, script], tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"mpilaunch: error: {why}\n")
    code, human = _adapter(tmp_path, "--visible-devices", value)
    assert (code, human) == (2, [f"mpilaunch.rank: error: {why}"])


def test_visible_devices_both_accept_a_full_list(tmp_path, script):
    assert frameworkenv.parse_devices(" 4, 5 ") == ("4", "5")
    proc, _ = run_cli(["--dry-run", "-np", "2", "--visible-devices", "4,5", script], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _adapter(tmp_path, "--visible-devices", "4")[0] == 0


def _resolver(monkeypatch, table):
    """getaddrinfo answering from ``table`` (name -> addresses, in the resolver's order)."""
    def getaddrinfo(name, *args, **kwargs):
        if name not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in table[name]]
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_rank0_address_is_the_resolvers_first_answer_on_both_sides(monkeypatch):
    """The launcher took sorted(addresses)[0], the ranks the resolver's first: 10.0.0.1 was
    checked while the scheduler listened on 10.0.0.9."""
    _resolver(monkeypatch, {"multi.example": ["10.0.0.9", "10.0.0.1"],
                            "192.0.2.1": ["192.0.2.1"], "192.0.2.2": ["192.0.2.2"]})
    remote = [Host("192.0.2.1", 2), Host("192.0.2.2", 2)]
    launcher = rankcheck._master_addr(SimpleNamespace(master_addr="multi.example"), remote, False)
    info = read_identity(fake_rank_env(rank=1, size=2), "vm")
    adapter = agree.agree(info, "multi.example", 8118, {}).sched_addr   # one node: no MPI
    assert launcher == adapter == "10.0.0.9"


def test_loopback_master_addr_across_hosts_refused_alike(monkeypatch):
    _resolver(monkeypatch, {"localhost": ["127.0.0.1"], "192.0.2.1": ["192.0.2.1"],
                            "192.0.2.2": ["192.0.2.2"]})
    two = [Host("192.0.2.1", 2), Host("192.0.2.2", 2)]
    launcher = _refusal(rankcheck._master_addr, SimpleNamespace(master_addr="localhost"), two, False)
    adapter = _refusal(agree.master_address, "localhost", True)
    tail = ("='localhost': resolves to 127.0.0.1, a loopback address, but the ranks span several "
            "hosts; give rank 0's host name or one of its addresses (or leave it out)")
    assert (launcher, adapter) == ("--master_addr" + tail, "--master-addr" + tail)
    # one host (here or elsewhere): loopback is where rank 0 is, on both sides
    assert rankcheck._master_addr(SimpleNamespace(master_addr="localhost"), two[:1], False) == \
        agree.master_address("localhost", False) == "127.0.0.1"


def test_master_addr_not_of_rank0s_host_refused_alike():
    """Both sides ask the kernel (a bind), not a list of addresses."""
    launcher = _refusal(rankcheck._master_addr, SimpleNamespace(master_addr="192.0.2.1"),
                        [Host("localhost", 2)], True)
    assert launcher.startswith("--master_addr='192.0.2.1': 192.0.2.1 is not an address of rank "
                               "0's host localhost (this machine)")
    with pytest.raises(net.PortError) as err:
        net.check_port("192.0.2.1", 0, "vm")          # what rank 0's adapter runs
    assert err.value.kind == net.ADDR_NOT_HERE
    own = net.local_ipv4s()
    if own:
        assert rankcheck._master_addr(SimpleNamespace(master_addr=own[0]),
                                      [Host("localhost", 2)], True) == own[0]
        net.check_port(own[0], 0, "vm")


def test_port_refusal_is_worded_from_its_kind_not_its_text(monkeypatch):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        adapter = _refusal(net.check_port, "127.0.0.1", port, "vm")
        launcher = _refusal(rankcheck._check_port, SimpleNamespace(master_port=port), "127.0.0.1")
    assert f"--master-port {port} is already in use on host vm" in adapter
    assert launcher == (f"--master_port={port}: already in use on rank 0's host (this machine); "
                        "give another port, or 0 to pick a free one")

    def refuse(addr, port, hostname, check_addr=True):   # a kind whose text says otherwise
        raise net.PortError("something else entirely", net.PORT_NOT_ALLOWED, addr, port)
    monkeypatch.setattr(net, "check_port", refuse)
    launcher = _refusal(rankcheck._check_port, SimpleNamespace(master_port=80), "127.0.0.1")
    assert launcher.startswith("--master_port=80: not allowed on rank 0's host")
