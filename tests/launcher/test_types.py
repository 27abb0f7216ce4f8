"""mypy over the whole of mpilaunch/ finds no error.

The checker and its options are in setup.cfg (``[mypy]``: which options and why; the version
pinned in the ``test`` extra, as a newer mypy finds new errors by itself). The declared
protocols (a backend, a plan, what a function takes and returns) are only worth their
annotations while something holds the code to them: this test does. It runs mypy as the
command a developer would (``python3 -m mypy`` from the repository root, setup.cfg read),
with mypy's cache in .mypy_cache/ (about 5 s cold, well under 1 s after)."""
import configparser
import os
import re
import subprocess
import sys
from importlib import metadata

from helpers import REPO

SETUP_CFG = os.path.join(REPO, "setup.cfg")


def _pinned() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    for line in cfg["options.extras_require"]["test"].splitlines():
        if line.strip().startswith("mypy=="):
            return line.strip()[len("mypy=="):]
    raise AssertionError("setup.cfg: the test extra pins no mypy (mypy==X.Y.Z)")


def _modules() -> int:
    return sum(1 for _, _, files in os.walk(os.path.join(REPO, "mpilaunch"))
               for f in files if f.endswith(".py"))


def test_mypy_finds_no_error_in_the_package():
    want = _pinned()
    try:
        got = metadata.version("mypy")
    except metadata.PackageNotFoundError:
        raise AssertionError(f"mypy is not installed: it is a test dependency "
                             f"(pip install -e '.[test]' installs mypy=={want})") from None
    assert got == want, f"mypy {got} is installed, setup.cfg pins {want}: pip install -e '.[test]'"
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", SETUP_CFG],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found errors:\n{proc.stdout}{proc.stderr}"
    # every module was checked: setup.cfg's files = mpilaunch, nothing excluded
    m = re.search(r"Success: no issues found in (\d+) source files", proc.stdout)
    assert m and int(m.group(1)) == _modules(), proc.stdout
