"""``mpilaunch check`` inside a Slurm job: the allocation is checked instead of ssh (a launch
there starts nothing over ssh: mpirun's daemons and ``--launcher srun``'s ranks go through
slurmd).

==========  ===============================================================================
check       what
==========  ===============================================================================
slots       np fits the allocation's task slots (``SLURM_TASKS_PER_NODE``), job-wide
node        ``scontrol show node -o`` of the allocated nodes: each is responding (no ``*``)
            and usable (IDLE/ALLOCATED/MIXED/COMPLETING, not DOWN/DRAIN/FAIL/...)
srun        a one-task step starts on that node (``srun -N1 -n1 -w NODE --overlap``), which
            runs the same probe as the ssh path (python ... syn-backlog, :mod:`probe`)
==========  ===============================================================================

The node check uses one ``scontrol`` call for all nodes; the steps run in parallel. Only the
``run_checks`` entry does anything (subprocesses); the rest is pure.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import replace
from typing import Dict, List, Mapping, Optional, Tuple

from mpilaunch.config import hostfile as hf
from mpilaunch import ssh
from mpilaunch.check.hosts import probe_results
from mpilaunch.check.probe import probe_argv
from mpilaunch.check.results import (
    CHECKS, DEFAULT_PARALLEL, FAIL, LEVEL_FULL, OK, SKIP, CheckResult, Params, check_slots)

USABLE = ("IDLE", "ALLOCATED", "MIXED", "COMPLETING")
BAD_FLAGS = ("DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND",
             "MAINT", "REBOOT_ISSUED", "REBOOT_REQUESTED", "POWERED_DOWN", "POWERING_DOWN",
             "POWER_DOWN")
AFTER_NODE = ("srun",) + CHECKS[CHECKS.index("python"):]


def node_states(text: str) -> Dict[str, Tuple[str, str]]:
    """``scontrol show node -o`` -> {NodeName: (State, Reason)}."""
    out: Dict[str, Tuple[str, str]] = {}
    for line in text.splitlines():
        name = re.search(r"\bNodeName=(\S+)", line)
        state = re.search(r"\bState=(\S+)", line)
        if name and state:
            reason = re.search(r"\bReason=(.*?)(?:\s+\w+=|$)", line)
            out[name.group(1)] = (state.group(1), reason.group(1).strip() if reason else "")
    return out


def node_problem(state: str) -> Optional[str]:
    """None when a node in ``state`` (``IDLE``, ``ALLOCATED+COMPLETING``, ``DOWN*+DRAIN``) can
    run the job's tasks, else what is wrong with it."""
    parts = state.split("+")
    base, flags = parts[0], parts[1:]
    if base.endswith("*") or "NOT_RESPONDING" in flags or "NO_RESPOND" in flags:
        return "not responding (its slurmd does not answer slurmctld)"
    bad = [f for f in flags if f in BAD_FLAGS]
    if base not in USABLE:
        return f"{base.lower()}" + (f" ({', '.join(bad)})" if bad else "")
    if bad:
        return ", ".join(f.lower() for f in bad)
    return None


def node_result(host: hf.Host, states: Mapping[str, Tuple[str, str]]) -> CheckResult:
    if host.name not in states:
        return CheckResult(host.name, "", "node", FAIL,
                           "scontrol does not know this node — is SLURM_JOB_NODELIST this job's?")
    state, reason = states[host.name]
    why = node_problem(state)
    if why is None:
        return CheckResult(host.name, "", "node", OK, f"State={state}")
    note = f", Reason={reason}" if reason and reason != "(null)" else ""
    return CheckResult(host.name, "", "node", FAIL,
                       f"Slurm State={state}{note}: {why} — resubmit without it "
                       f"(sbatch --exclude={host.name}) or ask the cluster admin")


def slots_result(p: Params) -> CheckResult:
    r = check_slots(p)
    if r.status != FAIL:
        return r
    return replace(r, message=f"np {p.np} (from {p.np_source}) is more than the "
                              f"{hf.total_slots(p.hosts)} task slot(s) of {p.hosts_source} — "
                              "lower np or ask Slurm for more tasks (sbatch --ntasks / "
                              "--ntasks-per-node)")


def srun_argv(srun: str, node: str, command: List[str]) -> List[str]:
    return [srun, "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--overlap",
            "--kill-on-bad-exit=1", "--export=ALL", "--quiet"] + command


def _skips(host: str, after: Tuple[str, ...], level: str) -> List[CheckResult]:
    return [CheckResult(host, "", c, SKIP) for c in (after if level == LEVEL_FULL else after[:1])]


def check_node(index: int, host: hf.Host, p: Params, srun: str, node: CheckResult,
               timeout: float, env: Mapping[str, str]) -> List[CheckResult]:
    """The node state (already known), then one step on the node (the probe, full level)."""
    out = [node]
    if node.status == FAIL:
        return out + _skips(host.name, AFTER_NODE, p.level)
    command = probe_argv(p, index == 0, timeout) if p.level == LEVEL_FULL else ["true"]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(srun_argv(srun, host.name, command), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace",
                              timeout=2 * timeout + 5, env=dict(env))
    except subprocess.TimeoutExpired:
        return out + [CheckResult(host.name, "", "srun", FAIL,
                                  f"a one-task step did not finish within {2 * timeout + 5:g}s "
                                  "there — slurmd does not start steps on it")] + _skips(
            host.name, AFTER_NODE[1:], p.level)
    took = time.monotonic() - t0
    if proc.returncode != 0 and (p.level != LEVEL_FULL or "srun: error" in proc.stderr):
        return out + [CheckResult(host.name, "", "srun", FAIL,
                                  f"srun exited {proc.returncode}: "
                                  f"{ssh.last_line(proc.stderr) or 'no output'}", took)] + _skips(
            host.name, AFTER_NODE[1:], p.level)
    out.append(CheckResult(host.name, "", "srun", OK, "step started", took))
    if p.level == LEVEL_FULL:
        out += probe_results(host.name, "", proc.returncode, proc.stdout, proc.stderr, p,
                             index == 0, took)
    return out


def run_checks(p: Params, env: Mapping[str, str], timeout: float,
               parallel: int = DEFAULT_PARALLEL) -> List[CheckResult]:
    """Every check of a launch inside a Slurm allocation (slots, node, srun[, probe])."""
    results = [slots_result(p)]
    path = env.get("PATH", os.defpath)
    scontrol, srun = shutil.which("scontrol", path=path), shutil.which("srun", path=path)
    if not scontrol or not srun:
        return results + [CheckResult("", "", "node", FAIL, "scontrol/srun not on PATH — load "
                                      "Slurm's client commands (module load slurm)")]
    names = ",".join(h.name for h in p.hosts)
    try:
        shown = subprocess.run([scontrol, "show", "node", "-o", names], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, errors="replace",
                               timeout=timeout, env=dict(env))
        states = node_states(shown.stdout)
    except subprocess.TimeoutExpired:
        states, shown = {}, None
    if not states:
        why = "timed out" if shown is None else ssh.last_line(shown.stderr) or "no output"
        return results + [CheckResult("", "", "node", FAIL,
                                      f"scontrol show node {names}: {why} — is slurmctld up?")]
    hosts = list(enumerate(p.hosts))
    per_host = ssh.parallel_map(
        lambda item: check_node(item[0], item[1], p, srun, node_result(item[1], states),
                                timeout, env), hosts, parallel)
    for (_, host), res in zip(hosts, per_host):
        if isinstance(res, BaseException):
            results.append(CheckResult(host.name, "", "srun", FAIL, f"internal error: {res!r}"))
        else:
            results.extend(res)
    return results
