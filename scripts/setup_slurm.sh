#!/usr/bin/env bash
# Install Slurm (Debian's slurm-wlm 22.05: slurmctld, slurmd, srun/sbatch/salloc/scancel) and
# munge for the slurm-marked tests. The tests start their own munged/slurmctld/slurmd by hand
# from a temp dir (tests/helpers/slurm/cluster.py); nothing is enabled or started here, and the
# packages' own services (no systemd in the sandbox) are not used.
#
# Idempotent: nothing is installed when the binaries are already there. A fresh install
# (apt-get update + ~60 packages) takes about 40-60 s on the 2-core CI machine.
set -euo pipefail

if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ] \
    && command -v srun >/dev/null && command -v sbatch >/dev/null; then
  echo "setup_slurm: slurm-wlm and munge already installed" >&2
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup_slurm: not root or no apt-get: the slurm tests will be skipped" >&2
  exit 0
fi
echo "setup_slurm: apt-get install slurm-wlm munge" >&2
apt-get update -qq
# policy-rc.d 101: the packages' postinst must not try to start services (there is no init).
created_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  created_policy=1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  slurm-wlm munge >/dev/null
if [ $created_policy = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
