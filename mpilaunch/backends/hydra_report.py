"""Hydra's (MPICH, Intel MPI) "BAD TERMINATION" block -> events for the summary. Pure.

Intel MPI::

    =   RANK 1 PID 4242 RUNNING AT node-b
    =   KILLED BY SIGNAL: 9 (Killed)

MPICH (no rank)::

    =   PID 4691 RUNNING AT 10.231.0.76
    =   EXIT CODE: 9

Used when an adapter died without a status line (SIGKILL). Blocks for SIGTERM (15) are the
teardown's victims (mpilaunch's own stop), never a root cause, and are skipped.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Iterable, List, Optional, Set, Tuple

if TYPE_CHECKING:
    import psutil

    from mpilaunch.backends.base import LaunchPlan

from mpilaunch import net, ssh

_BLOCK = re.compile(r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\s*\n"
                    r"=\s+(?:RANK\s+(\d+)\s+)?PID\s+(\d+)\s+RUNNING AT\s+(\S+)\s*\n"
                    r"=\s+(?:KILLED BY SIGNAL:\s*(\d+)|EXIT CODE:\s*(\d+))")
_TEARDOWN = 15


def bad_terminations(text: str) -> List[tuple]:
    """-> [(rank or None, pid, host, signal or None, exit code or None)], teardown ones left out.
    MPICH's "EXIT CODE: N" is given as it is (for a killed process it is the signal number)."""
    out = []
    for m in _BLOCK.finditer(text):
        rank = int(m.group(1)) if m.group(1) is not None else None
        sig = int(m.group(4)) if m.group(4) is not None else None
        code = int(m.group(5)) if m.group(5) is not None else None
        if (sig if sig is not None else code) == _TEARDOWN or (sig is None and not code):
            continue
        out.append((rank, int(m.group(2)), m.group(3), sig, code))
    return out


# Hydra's words when a proxy (its host) went away rather than a rank: MPICH 5.0.2 after a host
# crash ends the job with 255 and only "control_cb ... assert (!closed) failed" (no host named);
# the ssh that started the proxy may add "Connection to X closed" / "Timeout, server X not
# responding" (keepalive) / "Broken pipe".
_LOST_SIGNS = re.compile(r"assert \(!closed\) failed|control_cb|Timeout, server \S+ not responding|"
                         r"closed by remote host|Connection reset by peer|Broken pipe|"
                         r"unable to (?:connect|read|write)|Connection (?:timed out|refused)")


def proxy_lost(text: str) -> bool:
    """Hydra's output says a proxy or its connection was lost (no rank named)."""
    return _LOST_SIGNS.search(text) is not None


def _ssh_args(plan: LaunchPlan) -> List[str]:
    """The ssh options Hydra's ssh gets (MPICH: HYDRA_LAUNCHER_EXTRA_ARGS; Intel MPI:
    -bootstrap-exec-args), split."""
    import shlex

    joined = plan.extra_env.get("HYDRA_LAUNCHER_EXTRA_ARGS", "")
    ssh = list(plan.ssh)
    if "-bootstrap-exec-args" in ssh and ssh.index("-bootstrap-exec-args") + 1 < len(ssh):
        joined = ssh[ssh.index("-bootstrap-exec-args") + 1]
    try:
        return shlex.split(joined)
    except ValueError:
        return joined.split()


def unreachable_hosts(plan: LaunchPlan, timeout: float = 2.0) -> List[str]:
    """The remote hosts of ``plan`` whose ssh port (where ``ssh -G`` says ssh goes, with the
    launch's ssh options) does not accept a TCP connection within ``timeout`` s, probed in
    parallel: a crashed host refuses it (its sshd is gone), a host behind a dead link times out."""
    from mpilaunch.config import sshconfig

    # the job's ssh configuration is gone with the run dir by now: its ports, the user's -F
    extra, ports = sshconfig.direct(getattr(plan, "ssh_config", None), _ssh_args(plan))
    remote = [(h.name, ports.get(sshconfig.alias(h)), sshconfig.label(h))
              for h in plan.hosts if not net.is_here(h)]

    def probe(item: Tuple[str, Optional[int], str]) -> Optional[str]:
        name, port, label = item
        target = ssh.ssh_target(name, port, extra, timeout=timeout)
        addrs, _ = net.resolve(target.hostname, timeout)
        if not addrs:
            return label
        return label if ssh.tcp_probe(addrs[0], target.port, timeout) is not None else None

    found = ssh.parallel_map(probe, remote, 32) if remote else []
    return [r for r in found if isinstance(r, str)]


class ProxyWatch:
    """While mpiexec runs: Hydra keeps one ssh per remote host (the one that started its proxy)
    and does not notice when it ends (measured, MPICH 5.0.2: a link-down host's ssh ended by its
    keepalive at ~28 s and mpiexec still ran 50 s later, its proxy connection stalled). When such
    an ssh ends while mpiexec still runs and its host's ssh port does not answer, ``on_lost(host)``
    is called once (the launcher stops the job, the summary names the host)."""

    POLL = 1.0

    def __init__(self, plan: LaunchPlan, pid: int, on_lost: Callable[[List[str]], None]) -> None:
        import threading

        self.plan, self.pid, self.on_lost = plan, pid, on_lost
        self.thread = threading.Thread(target=self._run, name="hydra-proxy-watch", daemon=True)

    def start(self) -> "ProxyWatch":
        self.thread.start()
        return self

    def _hosts_with_ssh(self, proc: psutil.Process, names: Iterable[str]) -> Set[str]:
        import psutil

        seen: Set[str] = set()
        for child in proc.children():
            try:
                if child.name() != "ssh":
                    continue
                seen.update(a for a in child.cmdline()[1:] if a in names)
            except psutil.Error:
                continue
        return seen

    def _run(self) -> None:
        import time

        import psutil

        from mpilaunch.config.sshconfig import alias

        names = {alias(h) for h in self.plan.hosts if not net.is_here(h)}   # as Hydra's ssh has them
        if not names:
            return
        try:
            proc = psutil.Process(self.pid)
        except psutil.Error:
            return
        seen: set = set()
        probed: set = set()
        while True:
            time.sleep(self.POLL)
            try:
                if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                    return
                now = self._hosts_with_ssh(proc, names)
            except psutil.Error:
                return
            gone = (seen - now) - probed
            seen |= now
            if not gone:
                continue
            probed |= gone
            lost = unreachable_hosts(self.plan._replace(hosts=[h for h in self.plan.hosts
                                                               if alias(h) in gone]))
            if lost and proc.is_running():
                self.on_lost(lost)
                return
