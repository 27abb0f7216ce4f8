"""Running mpilaunch as a user would, with the test runner's environment cleaned of the
ModelArts variables that would change the launch."""
import os
import subprocess
import sys

from helpers import REPO


def clean_env(**extra):
    """The test runner's env minus ModelArts variables that would change the launch."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENMPI_", "SSHD_PORT", "TUNE_ENV_FILE", "VC_WORKER_", "MA_", "OMPI_COMM", "PMIX_"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def mpilaunch_argv(*args):
    """``python -m mpilaunch ARGS`` with this interpreter (helpers.mpis.mpilaunch_argv picks
    an install's interpreter and mpirun)."""
    return [sys.executable, "-m", "mpilaunch", *args]


def run(args, env=None, timeout=120, cwd=None):
    return subprocess.run(mpilaunch_argv(*args), env=env or clean_env(), cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def run_cli(args, tmp_path, env_extra=None):
    """mpilaunch ARGS in ``tmp_path`` with TMPDIR = ``tmp_path``/tmpdir (so a test can prove no
    run directory was created): (CompletedProcess, that TMPDIR)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENMPI_", "SSHD_PORT", "TUNE_ENV_FILE"))}
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmpdir)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-m", "mpilaunch", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return proc, tmpdir


def build_config(argv, env, tmp_path, source="print('hi')\n", python="/venv/bin/python3"):
    """The checked LaunchConfig of ``mpilaunch --python PYTHON ARGV train.py`` (the script
    written with ``source``: what it imports decides the framework), as the run command builds it."""
    from mpilaunch.config import launchconfig
    from mpilaunch.config.options import parser

    script = tmp_path / "train.py"
    script.write_text(source)
    return launchconfig.build(parser().parse_args(["--python", python] + argv + [str(script)]), env)
