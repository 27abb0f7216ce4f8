"""``--launcher srun`` decided without Slurm running (mpilaunch/backends/srun.py is pure but for
``srun --mpi=list``): the plugin choice, the mpirun options' meaning under srun, the argv."""
import os

import pytest

from mpilaunch.config import launchconfig, options
from mpilaunch.backends import srun
from mpilaunch.errors import UsageError

# `srun --mpi=list` of Debian's slurm-wlm 22.05.8 (measured here)
LISTING_22_05 = """MPI plugin types are...
\tpmix
\tnone
\tcray_shasta
\tpmi2
specific pmix plugin versions available: pmix_v4
"""


def test_plugin_prefers_pmix_then_pmi2():
    assert srun.pick_plugin(LISTING_22_05) == "pmix"
    assert srun.pick_plugin("srun: MPI types are...\nsrun: none\nsrun: pmi2\n") == "pmi2"
    assert srun.pick_plugin("MPI plugin types are...\n\tnone\n") == "none"
    assert srun.pick_plugin("srun: fatal: Could not establish a configuration source") == "none"


def test_mpirun_options_become_environment_or_are_listed_unused():
    env, unused = srun.translate(
        ["--bind-to", "none", "--map-by", "slot", "-x", "LD_LIBRARY_PATH", "-x", "NCCL_DEBUG=INFO",
         "--mca", "pml", "ob1", "--mca", "btl", "^openib", "--prtemca", "plm_ssh_no_tree_spawn",
         "true", "--bind-to=core"], "OPENMPI_X_ARGS")
    assert env == {"NCCL_DEBUG": "INFO", "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "^openib"}
    assert unused == ["--bind-to", "none", "--map-by", "slot", "--prtemca",
                      "plm_ssh_no_tree_spawn", "true", "--bind-to=core"]


def test_other_mpirun_options_are_refused():
    with pytest.raises(UsageError, match=r"^OPENMPI_EXTRA_ARGS: mpirun option '--hostfile' has "
                                         r"no meaning under --launcher srun"):
        srun.translate(["--hostfile", "x"], "OPENMPI_EXTRA_ARGS")


def _cfg(tmp_path, env, *argv):
    script = tmp_path / "train.py"
    script.write_text("")
    args = options.parser(options.RUN).parse_args(list(argv) + [str(script), "--lr", "0.1"])
    return launchconfig.build(args, env)


SLURM = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)",
         "SLURM_NTASKS": "4", "PATH": os.environ["PATH"]}


def test_plan_and_argv(tmp_path):
    env = {**SLURM, "MA_SECRET_TOKEN": "s3cr3t", "MA_PLAIN": "a b", "OPENMPI_X_ARGS": "-x FOO=1"}
    cfg = _cfg(tmp_path, env, "--launcher", "srun")
    assert cfg.starter == "srun" and cfg.np == 4
    plan = srun.make_plan(cfg, env, "/usr/bin/srun", "pmix", "/run/x")
    cmd = srun.argv(plan)
    assert cmd[:5] == ["/usr/bin/srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=4",
                       "--export=ALL"]
    assert cmd[5:] == list(plan.rank_command) and cmd[-3:] == [str(tmp_path / "train.py"),
                                                              "--lr", "0.1"]
    # already in the environment: exported as is; only new values are added
    # (the ModelArts default OPENMPI_MCA_ARGS: pml ob1, btl ^openib, plm_rsh_no_tree_spawn)
    assert plan.extra_env == {"FOO": "1", "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "^openib"}
    assert "s3cr3t" not in " ".join(cmd)
    assert plan.unused == ("--bind-to", "none", "--map-by", "slot", "--prtemca",
                           "plm_ssh_no_tree_spawn", "true")


def test_launcher_value_is_checked(tmp_path):
    with pytest.raises(UsageError, match=r"^MPILAUNCH_LAUNCHER='ssh': give mpirun or srun$"):
        _cfg(tmp_path, {**SLURM, "MPILAUNCH_LAUNCHER": "ssh"})


def test_srun_outside_an_allocation_is_a_usage_error(tmp_path):
    env = {"PATH": os.environ["PATH"]}
    cfg = _cfg(tmp_path, env, "--launcher", "srun", "-np", "1")
    with pytest.raises(UsageError, match="not inside a Slurm allocation"):
        srun.Srun.detect(env)
