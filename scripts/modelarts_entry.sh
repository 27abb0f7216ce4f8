#!/bin/sh
# ModelArts-style job entrypoint: every host of the job runs this same command.
#
#   scripts/modelarts_entry.sh [--wait-hosts SECONDS] [mpilaunch options] SCRIPT [ARGS...]
#
# The platform gives VC_WORKER_HOSTS, VC_TASK_INDEX, MA_NUM_GPUS and SSHD_PORT; worker-0
# (VC_TASK_INDEX=0) launches, the other hosts wait for its end and exit with its status
# (see `mpilaunch job --help`). The interpreter is $MPILAUNCH_PYTHON, else the python3 on
# PATH, made absolute: ssh sessions and ranks may see another PATH. Arguments pass through
# untouched (no shell re-parsing).
set -eu
py=${MPILAUNCH_PYTHON:-$(command -v python3 || true)}
if [ -z "$py" ]; then
    echo "modelarts_entry.sh: python3 not found on PATH; set MPILAUNCH_PYTHON=/abs/path/python3" >&2
    exit 2
fi
case $py in
    /*) ;;
    */*) py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py") ;;
    *) py=$(command -v "$py" || true) ;;
esac
case $py in
    /*) ;;
    *) echo "modelarts_entry.sh: cannot find the interpreter ${MPILAUNCH_PYTHON:-python3}" >&2; exit 2 ;;
esac
exec "$py" -m mpilaunch job "$@"
