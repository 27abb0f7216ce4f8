"""Per-host orchestration of ``mpilaunch check``: for every host, in parallel, resolve ->
ssh port -> ssh login -> (full level) the remote probe, each step with its own time-out.

A local host (``net.is_here``: ``localhost``, ``127.x``, this machine's name or one of its
addresses) is not reached over ssh; its probe runs as a local subprocess. Everything after the ssh login runs in
**one** ssh session per host (:mod:`mpilaunch.check.probe`).
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

from mpilaunch import contract, net, ssh
from mpilaunch.config import hostfile as hf
from mpilaunch.config import sshconfig

if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig
from mpilaunch.check.probe import evaluate_probe, parse_probe_output, probe_argv
from mpilaunch.check.results import (
    DEFAULT_PARALLEL, DEFAULT_TIMEOUT, FAIL, LEVEL_FULL, LEVEL_SSH, OK, SKIP, CheckResult, Params,
    check_slots, params_from_config, skip_rest)


def _run(cmd: List[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=timeout)


def _local_probe(name: str, addr: str, p: Params, rank0: bool, timeout: float) -> List[CheckResult]:
    t1 = time.monotonic()
    try:
        proc = _run(probe_argv(p, rank0, timeout), 2 * timeout)
    except FileNotFoundError:
        return [CheckResult(name, addr, "python", FAIL, f"{p.python} not found — pass --python PATH",
                            time.monotonic() - t1)] + skip_rest(name, addr, "python", p.level)
    except subprocess.TimeoutExpired:
        return [CheckResult(name, addr, "python", FAIL,
                            f"{p.python} probe did not finish within {2 * timeout:g}s",
                            time.monotonic() - t1)] + skip_rest(name, addr, "python", p.level)
    return probe_results(name, addr, proc.returncode, proc.stdout, proc.stderr, p, rank0,
                         time.monotonic() - t1)


def check_host(index: int, host: hf.Host, p: Params, timeout: float) -> List[CheckResult]:
    """Every check for one host; each step bounded by ``timeout`` (the ssh step by 2x: log in,
    then run). A step that fails ends the host's checks: the rest are skipped."""
    # ssh goes to the real name with the entry's port (config/sshconfig.py: the same sshd as the
    # MPI's alias); results name the entry (address:port when one address has several)
    t0 = time.monotonic()
    port = sshconfig.port_of(host, p.ssh_port)
    target = ssh.ssh_target(host.name, port, p.ssh_extra, timeout=max(2.0, min(timeout, 10.0)))
    name = hf.label(host)
    out, addrs = _resolve(name, target.hostname, p, timeout, t0)
    if addrs is None:
        return out
    addr, rank0 = addrs[0], index == 0
    if host.port is None and (net.is_here(host.name, addrs) or net.is_here(target.hostname, addrs)):
        return out + _local_host(name, addr, p, rank0, timeout)
    reached = _ssh_port(name, addr, target, _port_source(host, p), p, timeout)
    if reached[-1].status != OK:
        return out + reached
    return out + reached + _ssh_login(host, port, name, addr, target, p, rank0, timeout)


def _port_source(host: hf.Host, p: Params) -> str:
    """Where the ssh port came from, for a message about it."""
    return p.port_source if host.port is None else f"the port given in {p.hosts_source}"


def _resolve(name: str, hostname: str, p: Params, timeout: float,
             t0: float) -> Tuple[List[CheckResult], Optional[List[str]]]:
    """The resolve step: (its results, the addresses; None when the name does not resolve)."""
    addrs, why = net.resolve(hostname, timeout)
    if addrs is None:
        via = f" (ssh HostName {hostname})" if hostname != name else ""
        return [CheckResult(name, "", "resolve", FAIL,
                            f"does not resolve{via}: {why} — fix the name in {p.hosts_source} or "
                            "add it to DNS / /etc/hosts", time.monotonic() - t0)] + \
            skip_rest(name, "", "resolve", p.level), None
    return [CheckResult(name, addrs[0], "resolve", OK, ", ".join(addrs[:3]),
                        time.monotonic() - t0)], addrs


def _local_host(name: str, addr: str, p: Params, rank0: bool, timeout: float) -> List[CheckResult]:
    """This machine: no ssh; at the full level its probe runs as a local subprocess."""
    out = [CheckResult(name, addr, "ssh-port", SKIP, "local host"),
           CheckResult(name, addr, "ssh", SKIP, "local host")]
    return out + _local_probe(name, addr, p, rank0, timeout) if p.level == LEVEL_FULL else out


def _ssh_port(name: str, addr: str, target: ssh.SshTarget, psrc: str, p: Params,
              timeout: float) -> List[CheckResult]:
    """The ssh-port step; its last result is OK only when the port answered."""
    t1 = time.monotonic()
    if target.error:
        return [CheckResult(name, addr, "ssh-port", SKIP),
                CheckResult(name, addr, "ssh", FAIL, target.error, 0.0)] + \
            skip_rest(name, addr, "ssh", p.level)
    err = ssh.tcp_probe(addr, target.port, timeout)
    if err is not None:
        return [CheckResult(name, addr, "ssh-port", FAIL,
                            ssh.port_message(err, target.port, timeout, psrc),
                            time.monotonic() - t1)] + skip_rest(name, addr, "ssh-port", p.level)
    return [CheckResult(name, addr, "ssh-port", OK, f"port {target.port}", time.monotonic() - t1)]


def _ssh_login(host: hf.Host, port: Optional[int], name: str, addr: str, target: ssh.SshTarget,
               p: Params, rank0: bool, timeout: float) -> List[CheckResult]:
    """The ssh login (at the full level, the remote probe in the same session)."""
    t2 = time.monotonic()
    remote: Optional[str] = "true"
    if p.level == LEVEL_FULL:
        remote = ssh.remote_command(probe_argv(p, rank0, timeout))
    elif p.ssh_mux:
        remote = None   # the launch preflight: authenticate, leave the master for mpirun's ssh
    try:
        extra = list(p.ssh_extra) + ssh.mux_master_options(p.ssh_mux)
        proc = _run(ssh.ssh_argv(host.name, port, extra, timeout, remote), 2 * timeout)
    except FileNotFoundError:
        return [CheckResult(name, addr, "ssh", FAIL, ssh.NO_SSH)] + skip_rest(name, addr, "ssh", p.level)
    except subprocess.TimeoutExpired:
        return [CheckResult(name, addr, "ssh", FAIL,
                            f"ssh did not finish within {2 * timeout:g}s — sshd or the login hangs there",
                            time.monotonic() - t2)] + skip_rest(name, addr, "ssh", p.level)
    if proc.returncode == 255:
        why = ssh.classify_ssh_error(proc.stderr, target.port, timeout, _port_source(host, p))
        return [CheckResult(name, addr, "ssh", FAIL, why, time.monotonic() - t2)] + \
            skip_rest(name, addr, "ssh", p.level)
    if p.level != LEVEL_FULL:
        if proc.returncode != 0:
            return [CheckResult(name, addr, "ssh", FAIL,
                                f"logged in, but 'true' exited {proc.returncode} there: "
                                f"{ssh.last_line(proc.stderr)} — check the login shell / its start-up files")]
        return [CheckResult(name, addr, "ssh", OK, "login ok", time.monotonic() - t2)]
    return [CheckResult(name, addr, "ssh", OK, "login ok", time.monotonic() - t2)] + \
        probe_results(name, addr, proc.returncode, proc.stdout, proc.stderr, p, rank0,
                      time.monotonic() - t2)


def probe_results(name: str, addr: str, rc: int, stdout: str, stderr: str, p: Params, rank0: bool,
                  seconds: float) -> List[CheckResult]:
    """The probe's process result -> the python .. syn-backlog results of one host."""
    probe = parse_probe_output(stdout)
    if probe is None:
        low = (stderr or "").lower()
        if rc in (126, 127) or "not found" in low or "no such file" in low:
            msg = (f"{p.python} not found there — install the same Python (with mpilaunch and mpi4py) "
                   "at the same path on every host, or pass --python PATH")
        else:
            msg = f"{p.python} probe failed (exit {rc}): {ssh.last_line(stderr) or 'no output'}"
        return [CheckResult(name, addr, "python", FAIL, msg, seconds)] + skip_rest(name, addr, "python", p.level)
    res = evaluate_probe(name, addr, probe, p, rank0)
    return [replace(r, seconds=seconds if r.check == "python" else 0.0) for r in res]


def run_checks(cfg_or_params: Union[LaunchConfig, Params], timeout: float = DEFAULT_TIMEOUT, *, level: Optional[str] = None,
               parallel: int = DEFAULT_PARALLEL, mux: Optional[str] = None) -> List[CheckResult]:
    """Check every host of a launch. ``cfg_or_params``: a ``LaunchConfig`` (then ``level``
    defaults to ``"ssh"``: resolve, ssh port, ssh login -- cheap enough before every launch)
    or ``Params``. ``mux``: a ControlPath (``ssh.mux_path``): each login leaves a control master
    there for mpirun's ssh to reuse. Returns every result; failures have ``status == "fail"``."""
    if isinstance(cfg_or_params, Params):
        p = cfg_or_params
        if level is not None and level != p.level:
            p = replace(p, level=level)
    else:
        p = params_from_config(cfg_or_params, level=level or LEVEL_SSH)
    if mux is not None:
        p = replace(p, ssh_mux=mux)
    contract.seconds(timeout, "--timeout")
    results: List[CheckResult] = [check_slots(p)]
    hosts = list(enumerate(p.hosts))
    per_host = ssh.parallel_map(lambda item: check_host(item[0], item[1], p, timeout), hosts, parallel)
    for (_, host), res in zip(hosts, per_host):
        if isinstance(res, BaseException):
            results.append(CheckResult(hf.label(host), "", "ssh", FAIL, f"internal error: {res!r}"))
        else:
            results.extend(res)
    return results


def hosts_needing_ssh(hosts: Sequence[hf.Host]) -> bool:
    """True unless every host is this machine (``net.is_here``: no ssh involved)."""
    return not net.all_here(hosts)
