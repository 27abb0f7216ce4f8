"""The training-library tests' shared parts: the worker script (train_libs.py, beside this
file), torchrun's run of it (the reference: once per session, 2 ranks on this machine), and
the check that a run under mpilaunch matches it: every library took the launch for torchrun's
and ended with torchrun's weights."""
import json
import os
import subprocess
import sys

import pytest

from helpers.launch import clean_env

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_libs.py")
LIBS = ("deepspeed", "accelerate", "fabric", "trainer")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def have_libs():
    """Whether torch and every library are installed here (scripts/test.sh installs them
    pinned); looked up, not imported: importing them costs seconds at every collection."""
    from importlib.util import find_spec

    return all(find_spec(m) is not None for m in ("torch", "lightning", "accelerate", "deepspeed"))


needs_libs = pytest.mark.skipif(not have_libs(), reason="torch, lightning, accelerate or "
                                "deepspeed not installed (scripts/test.sh installs them)")


def read(out, world):
    """Every rank's record, by rank."""
    return [json.load(open(os.path.join(out, f"rank_{r}.json"))) for r in range(world)]


_REFERENCE = []


def torchrun_reference(tmp_path_factory):
    """torchrun --standalone --nproc-per-node 2 of the script: every rank's record (weights and
    what each library decided); run once per session, whichever test module asks first."""
    if not _REFERENCE:
        _REFERENCE.append(_torchrun(tmp_path_factory))
    return _REFERENCE[0]


def _torchrun(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun-reference")
    p = subprocess.run([TORCHRUN, "--standalone", "--nproc-per-node", "2", SCRIPT,
                        "--out", str(out)], env=clean_env(), cwd=str(out), capture_output=True,
                       text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return read(str(out), 2)


def check(out, reference, world=2):
    """Each rank under mpilaunch decided what torchrun's did, and every library ended with
    torchrun's weights; -> the records."""
    records = read(out, world)
    ref = reference[0]
    for rank, rec in enumerate(records):
        assert rec["torchelastic"] is True, rank
        assert rec["deepspeed"]["mpi4py_imported"] is False, rank   # no MPI discovery
        assert rec["accelerate"]["distributed_type"] == ref["accelerate"]["distributed_type"] \
            == "MULTI_CPU"
        for lib in ("fabric", "trainer"):
            assert rec[lib]["env"] == ref[lib]["env"] == "TorchElasticEnvironment", (rank, lib)
        for lib in LIBS:
            assert (rec[lib]["rank"], rec[lib]["world"]) == (rank, world), (rank, lib)
            assert rec[lib]["weights"] == ref[lib]["weights"], (rank, lib)
    assert len({r["env"]["TORCHELASTIC_RUN_ID"] for r in records}) == 1
    return records
