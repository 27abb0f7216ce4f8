"""Real frameworks in the tests: is MindSpore (its own venv, scripts/setup_mindspore.sh) or
PyTorch there, the example training scripts, and their single-process reference run."""
import os
import subprocess
import sys

import pytest

from helpers import EXAMPLES

if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
import compare_params  # noqa: E402,F401  (examples/compare_params.py, for the tests)

MS_PY = os.environ.get("MPILAUNCH_MS_PYTHON", "/opt/mpilaunch/ms-venv/bin/python")
HAVE_MS = os.access(MS_PY, os.X_OK) and subprocess.run(
    [MS_PY, "-c", "import mindspore, mpilaunch"], capture_output=True).returncode == 0
needs_ms = pytest.mark.skipif(not HAVE_MS, reason=f"no MindSpore venv at {MS_PY} (run scripts/setup_mindspore.sh)")
try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch==2.13.0 not installed")

MS_TRAIN = os.path.join(EXAMPLES, "ms_train.py")
TORCH_TRAIN = os.path.join(EXAMPLES, "torch_train.py")


def reference(python, script, tmp_path, steps):
    subprocess.run([python, script, "--reference", "--world-size", "2", "--steps", str(steps),
                    "--out", str(tmp_path / "out")], check=True, capture_output=True, timeout=120)
