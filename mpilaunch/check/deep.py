"""``mpilaunch check --deep``: after the usual checks, measure every host that passed and
name the one that is slow (mpilaunch/check/outliers.py decides; mpilaunch/check/agent.py
measures, one agent per host, started over the ssh connection the check left open).

Order, all within ``budget`` seconds (the windows are cut to fit the host count):

1. the agents start on every host at once and say hello (kernel boot id, CPUs, devices);
2. compute, memory copy and log-dir write, **one host at a time per machine**: hosts with
   the same kernel boot id share one machine's CPUs and memory bus (containers or network
   namespaces on one node, like the test hosts here), so measuring them at once would
   measure each other; hosts on different machines are measured at the same time;
3. the network: each host sends to the next and the previous host of the ring (and, with
   ``pairs``, to that many others drawn with a fixed seed), both directions because one
   direction cannot tell a slow sender from a slow receiver; links are measured in waves in
   which no machine carries two links, so they do not share a CPU either;
4. the suspects are measured again, and only a host slow both times is named;
5. with ``collective``, a torch.distributed allreduce across all hosts, timed (job-wide).
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from mpilaunch import ssh
from mpilaunch.check import outliers
from mpilaunch.check.results import FAIL, OK, CheckResult, Params
from mpilaunch.check.schedule import (GEMM_MAX_SHARED, ROUNDS, Windows, combine, link_waves,
                                      retest_links, ring_links, windows)
from mpilaunch.config import hostfile as hf
from mpilaunch.config import mpi, preflight

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig

NET_BYTES = 32 << 20       # per directed link at most (healthy links end before the window)
DISK_BYTES = 2 << 20       # over the rounds: a fsync of this much is most of the measure


class DeepParams(NamedTuple):
    """--deep-budget s, --deep-threshold x, --deep-min-free bytes, --pairs n, --collective
    (None, gloo or nccl), the launch's log dir."""

    budget: float
    threshold: float
    min_free: float
    pairs: int
    collective: Optional[str]
    log_dir: str


class AgentError(Exception):
    pass


class Agent:
    """The checker's end of one host's agent: a TCP connection and its line protocol."""

    def __init__(self, index: int, name: str, addr: str, slots: int, port: int, token: str,
                 timeout: float):
        self.index, self.name, self.addr, self.slots, self.port = index, name, addr, slots, port
        self.hello: dict = {}
        try:
            self.sock = socket.create_connection((addr, port), timeout)
            self.sock.sendall(json.dumps({"t": token, "cmd": 1}).encode() + b"\n")
        except OSError as exc:
            raise AgentError(f"cannot reach its agent at {addr}:{port}: "
                             f"{exc.strerror or exc}") from None
        self.file = self.sock.makefile("rw", encoding="utf-8")
        self.hello = self._next(timeout)

    def _next(self, timeout: float) -> dict:
        try:
            self.sock.settimeout(timeout)
            line = self.file.readline()
        except socket.timeout:
            raise AgentError(f"its agent did not answer within {timeout:.3g}s") from None
        except OSError as exc:
            raise AgentError(f"its agent's connection broke: {exc}") from None
        if not line:
            raise AgentError("its agent ended")
        try:
            return json.loads(line)
        except ValueError:
            raise AgentError(f"its agent said something else: {line[:100]!r}") from None

    def ask(self, cmd: dict, timeout: float) -> dict:
        try:
            self.file.write(json.dumps(cmd) + "\n")
            self.file.flush()
        except OSError:
            raise AgentError("its agent ended") from None
        return self._next(timeout)

    def close(self) -> None:
        try:
            self.file.write('{"op": "exit"}\n')
            self.file.flush()
        except OSError:
            pass
        self.file.close()      # the socket closes with its last file
        self.sock.close()


def agent_source() -> str:
    """What the probe runs in its child: the host facts, then the agent (check/agent.py)."""
    here = os.path.dirname(os.path.abspath(__file__))
    parts = []
    for name in ("agentfacts.py", "agent.py"):
        with open(os.path.join(here, name), encoding="utf-8") as f:
            parts.append(f.read())
    return "\n".join(parts)


@dataclass(frozen=True)
class DeepCheckParams(Params):
    """The check's Params with what the probe needs to start the deep agent (probe.py)."""
    deep: Optional[dict] = None


def _measure_host(a: Agent, w: Windows, dp: DeepParams, slack: float, disk: bool) -> outliers.Host:
    """One round on one host; the log dir only in the first (a fsync per round would cost
    more than the write it times, and its figure only warns)."""
    comp = a.ask({"op": "compute", "slots": a.slots, "window": w.compute}, w.compute * 20 + slack)
    mem = a.ask({"op": "memory", "window": w.memory}, w.memory * 20 + slack)
    disk_ans = a.ask({"op": "disk", "dir": dp.log_dir, "bytes": DISK_BYTES,
                      "window": ROUNDS * w.disk}, ROUNDS * w.disk * 20 + slack) if disk else None
    for what, ans in (("compute", comp), ("memory", mem)):
        if ans.get("error"):
            raise AgentError(f"its {what} probe failed: {ans['error']}")
    return outliers.Host(a.name, a.addr, own_name(a), a.slots, comp.get("rates"), comp.get("kind"),
                         mem.get("rate"), disk_ans, a.hello.get("devices"), cpus(a))


def cpus(a: Agent) -> Optional[tuple]:
    limit, src = a.hello.get("cpu_limit") or (None, "")
    return (a.hello["ncpu"], limit, src) if "ncpu" in a.hello else None


def own_name(a: Agent) -> str:
    """The host's own name, when the host list calls it something else ("" if not)."""
    host = a.hello.get("hostname") or ""
    return host if host != a.name else ""


def host_stage(agents: Sequence[Agent], only: Sequence[int], w: Windows, dp: DeepParams,
               slack: float, parallel: int) -> Dict[int, Union[outliers.Host, AgentError]]:
    """Measure hosts ``only``, one at a time per machine, machines at once."""
    groups: Dict[str, List[int]] = {}
    for i in only:
        groups.setdefault(agents[i].hello.get("boot_id", str(i)), []).append(i)

    def one_machine(idx: List[int]) -> Dict[int, Union[outliers.Host, AgentError]]:
        got: Dict[int, list] = {i: [] for i in idx}
        failed: Dict[int, AgentError] = {}
        for k in range(ROUNDS):
            for i in (idx if k % 2 == 0 else idx[::-1]):
                if i in failed:
                    continue
                try:
                    got[i].append(_measure_host(agents[i], w, dp, slack, k == 0))
                except AgentError as exc:
                    failed[i] = exc
        return {i: failed.get(i) or combine(got[i]) for i in idx}

    out: Dict[int, Union[outliers.Host, AgentError]] = {}
    for res in ssh.parallel_map(one_machine, list(groups.values()), parallel):
        if isinstance(res, BaseException):
            raise res
        out.update(res)
    return out


def _one_link(agents: Sequence[Agent], ln: Tuple[int, int], w: Windows, slack: float,
              tid: str) -> outliers.Link:
    src, dst = agents[ln[0]], agents[ln[1]]
    try:
        sent = src.ask({"op": "send", "addr": dst.addr, "port": dst.port, "id": tid,
                        "pings": 5, "bytes": NET_BYTES, "window": w.net, "timeout": slack},
                       w.net + 2 * slack)
        if sent.get("error"):
            return outliers.Link(ln[0], ln[1], None, None, sent["error"], sent.get("iface"))
        got = dst.ask({"op": "result", "id": tid, "timeout": slack}, 2 * slack)
    except AgentError as exc:
        return outliers.Link(ln[0], ln[1], None, None, str(exc), None)
    bw = got["bytes"] / got["seconds"] if got.get("seconds") else None
    return outliers.Link(ln[0], ln[1], bw, sent.get("rtt"), got.get("error") if bw is None else None,
                         sent.get("iface"))


def net_stage(agents: Sequence[Agent], links: Sequence[tuple], w: Windows, slack: float,
              parallel: int, tag: str) -> List[outliers.Link]:
    machine = [a.hello.get("boot_id", str(a.index)) for a in agents]
    done: Dict[tuple, outliers.Link] = {}
    for k, wave in enumerate(link_waves(links, machine)):
        res = ssh.parallel_map(
            lambda ln: _one_link(agents, ln, w, slack, f"{tag}{k}-{ln[0]}-{ln[1]}"), wave, parallel)
        for ln, r in zip(wave, res):
            done[ln] = r if isinstance(r, outliers.Link) else outliers.Link(
                ln[0], ln[1], None, None, f"internal error: {r!r}", None)
    return [done[ln] for ln in links]


class DeepReport(NamedTuple):
    """What the deep check adds to the report: its results (per host and column; FAIL for an
    outlier), the table's cells, the verdict line and notes (job-wide lines)."""

    results: List[CheckResult]
    cells: Dict[str, Dict[str, str]]
    verdict: str
    notes: List[str]


def passed_hosts(p: Params, results: Sequence[CheckResult]) -> List[tuple]:
    """(index, name, addr, slots) of the hosts with no failed check, in hostfile order."""
    failed = {r.host for r in results if r.status == FAIL and r.host}
    addr = {r.host: r.addr for r in results if r.host and r.addr}
    return [(i, hf.label(h), addr.get(hf.label(h), h.name), h.slots) for i, h in enumerate(p.hosts)
            if hf.label(h) not in failed]


def agent_ports(results: Sequence[CheckResult]) -> Dict[str, int]:
    return {r.host: int(r.message.split()[-1]) for r in results if r.check == "agent"}


def start_agents(hosts: Sequence[tuple], ports: Mapping[str, int], token: str, timeout: float,
                 parallel: int) -> Tuple[List[Agent], List[CheckResult]]:
    """Connect to the agents of ``hosts`` (the probe started them) -> (agents that said
    hello, [CheckResult] for those that did not)."""
    def start(h: tuple) -> Union[Agent, CheckResult]:
        i, name, addr, slots = h
        if name not in ports:
            return CheckResult(name, addr, "compute", FAIL,
                               "the probe there started no agent for the deep check")
        try:
            return Agent(i, name, addr, slots, ports[name], token, 2 * timeout)
        except AgentError as exc:
            return CheckResult(name, addr, "compute", FAIL, str(exc))

    agents: List[Agent] = []
    bad: list = []   # CheckResult, or what start raised
    for r in ssh.parallel_map(start, list(hosts), parallel):
        if isinstance(r, Agent):
            agents.append(r)
        else:
            bad.append(r)
    for k, a in enumerate(agents):
        a.index = k
    return agents, [b if isinstance(b, CheckResult) else CheckResult(
        "", "", "compute", FAIL, f"internal error: {b!r}") for b in bad]


def dismiss(hosts: Sequence[tuple], ports: Mapping[str, int], token: str, timeout: float,
            parallel: int) -> None:
    """End the agents of hosts that failed a check (their alarm would, later)."""
    def end(h: tuple) -> None:
        try:
            Agent(h[0], h[1], h[2], h[3], ports[h[1]], token, timeout).close()
        except (AgentError, ValueError):
            pass

    ssh.parallel_map(end, [h for h in hosts if h[1] in ports and h[2]], parallel)


def run_deep(p: Params, results: Sequence[CheckResult], dp: DeepParams, token: str,
             timeout: float, parallel: int) -> DeepReport:
    t0 = time.monotonic()
    ports = agent_ports(results)
    good = passed_hosts(p, results)
    names = {h[1] for h in good}
    addr = {r.host: r.addr for r in results if r.host and r.addr}
    dismiss([(i, hf.label(h), addr.get(hf.label(h), ""), h.slots) for i, h in enumerate(p.hosts)
             if hf.label(h) not in names], ports, token, timeout, parallel)
    agents, bad = start_agents(good, ports, token, timeout, parallel)
    _phase("agents connected", t0)
    try:
        return _measure(agents, bad, dp, timeout, parallel, t0)
    finally:
        for a in agents:
            a.close()


def _measure(agents: Sequence[Agent], bad: List[CheckResult], dp: DeepParams, timeout: float, parallel: int, t0: float) -> DeepReport:
    n = len(agents)
    per_machine: Dict[str, int] = {}
    for a in agents:
        key = a.hello.get("boot_id", str(a.index))
        per_machine[key] = per_machine.get(key, 0) + 1
    machine = [a.hello.get("boot_id", str(a.index)) for a in agents]
    gemm = max(per_machine.values(), default=1) <= GEMM_MAX_SHARED   # numpy's import: 0.15 s CPU
    for a, r in zip(agents, ssh.parallel_map(
            lambda a: a.ask({"op": "prepare", "gemm": gemm}, 4 * timeout), agents, parallel)):
        if isinstance(r, dict):
            a.hello["numpy"] = r.get("numpy")
    links = ring_links(n, dp.pairs)
    w = windows(dp.budget, max(per_machine.values(), default=1),
                len(link_waves(links, machine)))
    slack = max(2.0, timeout / 2)
    measured = host_stage(agents, list(range(n)), w, dp, slack, parallel)
    _phase(f"hosts measured ({w})", t0)
    hosts: List[outliers.Host] = []
    for i, a in enumerate(agents):
        m = measured[i]
        if isinstance(m, AgentError):
            bad.append(CheckResult(a.name, a.addr, "compute", FAIL, str(m)))
            m = outliers.Host(a.name, a.addr, own_name(a), a.slots, None, None, None, None, None,
                              cpus(a))
        hosts.append(m)
    net_links = net_stage(agents, links, w, slack, parallel, "a")
    _phase("links measured", t0)
    found = outliers.findings(hosts, net_links, dp.threshold, dp.min_free)
    suspects = sorted({f.host for f in found if f.check in ("compute", "memory", "disk")})
    if suspects:   # once more: a host slow only once was unlucky, not bad
        again = host_stage(agents, suspects, w, dp, slack, parallel)
        hosts = outliers.merge_better(hosts, {i: h for i, h in again.items()
                                              if isinstance(h, outliers.Host)})
    slow = outliers.slow_links(net_links, dp.threshold)
    if slow:
        figs = outliers.net_figures(n, net_links)
        good = sorted(range(n), key=lambda i: -(outliers.host_net(figs[i]) or 0))
        net_links = outliers.merge_links(net_links, net_stage(
            agents, retest_links(slow, n, good), w, slack, parallel, "b"))
    found = outliers.findings(hosts, net_links, dp.threshold, dp.min_free)
    _phase(f"suspects measured again: {suspects} {slow}", t0)
    notes: List[str] = []
    res = outliers.results(hosts, net_links, found) + bad
    for ln in net_links:
        if ln.error:
            a = agents[ln.src]
            res.append(CheckResult(a.name, a.addr, "net", FAIL, ln_text(agents, ln)))
    if dp.collective and n > 1:
        from mpilaunch.check import collective

        notes.append(collective.allreduce(agents, dp.collective, timeout))
    cells = outliers.table_cells(hosts, net_links, found)
    return DeepReport(res, cells, outliers.verdict(hosts, net_links, found, dp.threshold,
                                                   time.monotonic() - t0), notes)


def _phase(what: str, t0: float) -> None:
    if os.environ.get("MPILAUNCH_DEBUG_DEEP"):   # where the budget goes (bench, tests)
        import sys

        print(f"mpilaunch check --deep: {time.monotonic() - t0:.2f}s {what}", file=sys.stderr)


def ln_text(agents: Sequence[Agent], ln: outliers.Link) -> str:
    return (f"cannot measure the link {agents[ln.src].name}→{agents[ln.dst].name} "
            f"(port {agents[ln.dst].port}): {ln.error} — a firewall between the "
            "hosts blocks the ranks too")


def check_deep(p: Params, settings: preflight.DeepSettings, log_dir: str, timeout: float,
               parallel: int) -> tuple:
    """The usual checks, their probe also starting each host's agent, then the deep ones on
    the hosts that passed: (results, DeepReport)."""
    import secrets

    from mpilaunch.check.hosts import run_checks

    dp = DeepParams(settings.budget, settings.threshold, settings.min_free, settings.pairs,
                    settings.collective, log_dir)
    token = secrets.token_hex(16)
    ask = {"code": agent_source(), "token": token, "life": 3 * dp.budget + 6 * timeout,
           "torch": bool(dp.collective)}
    fields = {f: getattr(p, f) for f in p.__dataclass_fields__}
    results = run_checks(DeepCheckParams(**fields, deep=ask), timeout, parallel=parallel)
    report = run_deep(p, results, dp, token, timeout, parallel)
    return [r for r in results if r.check != "agent"] + report.results, report


def gate_fails(cfg: LaunchConfig, env: Mapping[str, str]) -> bool:
    """``mpilaunch --preflight deep``: the launch's hosts through ``check --deep`` with its
    defaults first; each failure and the verdict on stderr, and True (nothing starts) when a
    check failed or a host is an outlier."""
    import sys
    from types import SimpleNamespace

    from mpilaunch.check.results import (DEFAULT_PARALLEL, DEFAULT_TIMEOUT, LEVEL_FULL, failed,
                                         params_from_config)

    p = params_from_config(cfg, level=LEVEL_FULL, mpi_info=mpi.detect(cfg.mpirun, env),
                           check_script=True)
    results, report = check_deep(p, cfg.deep or preflight.deep_settings(SimpleNamespace(), env), cfg.log_dir,
                                 DEFAULT_TIMEOUT, DEFAULT_PARALLEL)
    bad = failed(results)
    for r in bad:
        print(f"mpilaunch: preflight: {r.line()}", file=sys.stderr)
    if bad:
        print(f"mpilaunch: preflight: {report.verdict}", file=sys.stderr)
        print("mpilaunch: not started (details: mpilaunch check --deep --table ...)",
              file=sys.stderr)
    return bool(bad)
