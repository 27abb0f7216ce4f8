"""Preflight of a multi-node launch (``mpilaunch check``; the ssh level also runs before
every multi-host launch, see ``mpilaunch.run``).

==============  ==========================================================================
check           what
==============  ==========================================================================
resolve         the ssh destination (``ssh -G``: HostName from ``-F`` configs) resolves
ssh-port        its ssh port (``ssh -G``: ``--ssh-port``/``SSHD_PORT``/config) accepts TCP
ssh             ``ssh -o BatchMode=yes -o ConnectTimeout=N host ...`` logs in, no prompt
python          the rank interpreter (``--python``, else this one) exists at that path
mpilaunch       ``import mpilaunch`` works there and reports this host's version
mpi4py          ``import mpi4py`` works there
mpirun          the same mpirun path exists there and reports the same Open MPI version
script          the script (when given) exists at the same absolute path
sched-port      the scheduler/master port is free on rank 0's host (the first host)
somaxconn,      ``net.core.somaxconn`` / ``net.ipv4.tcp_max_syn_backlog`` (warning only) for
syn-backlog     large jobs (>= 64 ranks): below max(4096, ranks) connections may be dropped
slots           the hosts' slots cover np (job-wide)
node, srun      inside a Slurm job, instead of resolve/ssh-port/ssh: the allocated node's
                Slurm state, and a one-task step on it that runs the probe (``check/slurm.py``)
==============  ==========================================================================

Modules: ``results`` (what is checked, what is found), ``probe`` (the remote probe and its
evaluation), ``hosts`` (per-host orchestration, :func:`run_checks`), ``report`` (lines and
table), ``command`` (``main``). ssh/TCP primitives live in :mod:`mpilaunch.ssh`.
"""
from mpilaunch.check.hosts import check_host, hosts_needing_ssh, run_checks
from mpilaunch.check.probe import (
    PROBE_CODE, backlog_needed, evaluate_probe, evaluate_sysctl, parse_probe_output, probe_argv)
from mpilaunch.check.report import MAX_LINES_PER_CHECK, TABLE_MAX_HOSTS, report_lines
from mpilaunch.check.results import (
    CHECKS, DEFAULT_PARALLEL, DEFAULT_TIMEOUT, FAIL, LEVEL_FULL, LEVEL_SSH, OK, SKIP, WARN,
    CheckResult, Params, check_slots, failed, params_from_config)

__all__ = [
    "CHECKS", "DEFAULT_PARALLEL", "DEFAULT_TIMEOUT", "FAIL", "LEVEL_FULL", "LEVEL_SSH",
    "MAX_LINES_PER_CHECK", "OK", "PROBE_CODE", "SKIP", "TABLE_MAX_HOSTS", "WARN", "CheckResult",
    "Params", "backlog_needed", "check_host", "check_slots", "evaluate_probe", "evaluate_sysctl",
    "failed", "hosts_needing_ssh", "params_from_config", "parse_probe_output", "probe_argv",
    "report_lines", "run_checks",
]
