"""The job really spans its hosts: every rank compares what the starter
gave it with the plan before its script starts."""
import subprocess

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS

from mpilaunch.backends import placement
from mpilaunch.errors import UsageError
from mpilaunch.rank import span as rank_span


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_an_extra_arg_overriding_the_hostfile_fails_before_the_script(mpirun, tmp_path):
    # Measured on 5.0.11 and 4.1.4: --host localhost:2 silently wins over a 2-host hostfile,
    # and both ranks run here.
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    marker = tmp_path / "started"
    script = tmp_path / "x.py"
    script.write_text(f"open({str(marker)!r}, 'a').close()\n")
    r = subprocess.run(mpilaunch_argv("--mpirun", mpirun, "--hostfile", str(hf), "--no-preflight",
                                      "--no-scheduler", "--master_port", "0",
                                      "--extra-args", "--host localhost:2",
                                      "--log_dir", str(tmp_path / "logs"), str(script)),
                       env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert not marker.exists()
    assert "the ranks do not run where the plan put them" in r.stderr
    assert "planned: localhost: 1, 127.0.0.2: 1" in r.stderr
    assert "running: " in r.stderr and ": 2 (every rank on this one host)" in r.stderr
    # --no-span-check: the user's mapping is taken as it is
    r = subprocess.run(mpilaunch_argv("--mpirun", mpirun, "--hostfile", str(hf), "--no-preflight",
                                      "--no-scheduler", "--master_port", "0", "--no-span-check", "--extra-args",
                                      "--host localhost:2", "--log_dir", str(tmp_path / "logs"),
                                      str(script)),
                       env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert marker.exists()


@pytest.mark.parametrize("spec, rank, size, local, bad", [
    ("4;exact;a:2,b:2", 0, 4, 2, None),
    ("4;exact;a:2,b:2", 3, 4, 2, None),
    ("4;exact;a:2,b:2", 0, 4, 4, "rank 0 was planned on a with 2 rank(s) there, but its host h runs 4"),
    ("3;exact;a:1,b:2", 2, 3, 1, "rank 2 was planned on b with 2 rank(s) there"),
    ("4;exact;a:2,b:2", 0, 2, 2, "the job runs 2 ranks, the plan 4"),
    ("2;bound;a:1,b:1", 0, 2, 2, "host h runs 2 ranks, more than any planned host's 1 slot(s)"),
    ("4;bound;a:2,b:2", 1, 4, 1, None),
    ("8;size;a:2", 5, 8, 8, None),
])
def test_rank_side_rule(spec, rank, size, local, bad):
    got = rank_span.problem(rank_span.parse(spec), rank, size, local, "h")
    assert (got is None) if bad is None else (bad in got)


def test_plan_side_spec():
    from collections import namedtuple

    from mpilaunch.config import mpiargs
    from mpilaunch.config.launchconfig import Setting
    from mpilaunch.config.hostfile import Host

    def C(hosts, np, *settings):   # the configuration's fields the placement reads
        return namedtuple("C", "hosts np mpi_pieces")(hosts, np, mpiargs.pieces(settings))

    slot = Setting("-bind-to none -map-by slot", "default")
    none = Setting("", "default")
    hosts = (Host("a", 2), Host("b", 2))
    assert placement.expect_spec(C(hosts, 3, slot, none, none)) == "3;exact;a:2,b:1"
    assert placement.expect_spec(C(hosts, 4, Setting("--map-by node", "x"), none, none)) == "4;bound;a:2,b:2"
    assert placement.expect_spec(C(hosts, 4, slot, Setting("-H a:4", "x"), none)) == "4;bound;a:2,b:2"
    assert placement.expect_spec(C(hosts, 6, slot, none, none)) == "6;size;a:2,b:2"
    with pytest.raises(UsageError):
        rank_span.parse("x;exact;a:1")
