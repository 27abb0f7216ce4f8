"""The adapter's `python -S _boot.py` start must find the packages of the interpreter it runs
with: a venv's own site-packages, not the base installation's (under -S, sys.prefix is the base)."""
import os
import subprocess
import sys

from mpilaunch.backends import rankcmd

PROBE = ("import sys; __file__ = sys.argv[1]; "
         "exec(open(__file__).read().split('if __name__')[0]); print('\\n'.join(_paths()))")


def boot_paths(python):
    out = subprocess.run([python, "-S", "-c", PROBE, rankcmd.BOOT], capture_output=True, text=True, check=True)
    return out.stdout.split()


def site_packages(prefix):
    return os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")


def test_venv_interpreter_gets_the_venvs_site_packages(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    paths = boot_paths(str(venv / "bin" / "python"))
    assert paths[0] == os.path.dirname(os.path.dirname(os.path.dirname(rankcmd.BOOT)))
    assert site_packages(str(venv)) in paths
    assert site_packages(sys.base_prefix) not in paths


def test_venv_with_system_site_packages_gets_both(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    paths = boot_paths(str(venv / "bin" / "python"))
    assert paths.index(site_packages(str(venv))) < paths.index(site_packages(sys.base_prefix))


def test_a_venv_python_is_not_mistaken_for_its_base(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    other = str(venv / "bin" / "python")
    assert rankcmd.rank_interpreter(other, sys.executable) == [other, "-m", "mpilaunch.rank"]
