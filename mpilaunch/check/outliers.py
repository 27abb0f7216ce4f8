"""What ``mpilaunch check --deep`` makes of its measurements: each host against the median of
all hosts, the table's cells and the one-line verdict. Pure: values in, values out.

A host is an **outlier** when one of its figures is ``threshold`` times worse than the
median of the hosts (the median of the links for the network):

* compute (per slot, the median of its slots; hosts compared only with hosts that ran the
  same workload, GEMM or the Python loop), memory copy: ``threshold`` times lower;
* log-dir write speed ``threshold`` times lower: a warning only (:data:`WARN_ONLY`): a
  fsync'd write to shared storage varies from run to run with what else writes there;
* network: a host's figure is the lower of its best sending link and its best receiving
  link, so a host is blamed only when even its best link in one direction is slow (one slow
  peer slows one link, not all of a host's links); the slow links are named;
* round trip: ``threshold`` times the median *and* at least :data:`RTT_SLACK` more (a
  0.05 ms round trip doubling is scheduling noise, not a bad host);
* CPUs: fewer than its slots (the CPUs it may run on, or its cgroup's CPU quota): always;
* log dir: less than ``min_free`` bytes free, or no file can be written there: always;
* devices: where any host shows devices, fewer than its slots.

The orchestrator (check/deep.py) measures the suspects once more and keeps the better of the
two figures (:func:`merge_better`): a host is named only when it was slow both times.
"""
from __future__ import annotations

import statistics
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from mpilaunch.check.results import FAIL, OK, SKIP, WARN, CheckResult

COLUMNS = ("cpus", "compute", "memory", "disk", "free", "devices", "net", "rtt")
RTT_SLACK = 0.001      # seconds a round trip must exceed the median by, besides the factor
WARN_ONLY = ("disk",)  # findings that warn, not fail


class Host(NamedTuple):
    """One host's measurements (None: not measured)."""

    name: str
    addr: str
    own: str                        # its own name, when it is not ``name`` ("" else)
    slots: int
    compute: Optional[List[float]]  # per-slot rates, ``kind`` names the unit
    kind: Optional[str]
    memory: Optional[float]         # bytes/s
    disk: Optional[dict]            # the agent's answer: where, free, rate or error
    devices: Optional[dict]         # the agent's answer
    # (CPUs it may run on, the cgroup's CPU quota or None, where the quota was read)
    cpus: Optional[Tuple[int, Optional[float], str]] = None


class Link(NamedTuple):
    """One directed link between host indices: bytes/s, round trip s (None: not measured)."""

    src: int
    dst: int
    bw: Optional[float]
    rtt: Optional[float]
    error: Optional[str]
    iface: Optional[str]


class Finding(NamedTuple):
    """An outlier: ``host`` index, the figure, the median, how many times worse."""

    host: int
    check: str                      # one of COLUMNS
    value: Optional[float]
    median: Optional[float]
    ratio: Optional[float]
    detail: Union[str, List[Link]]  # the unit, where, or the slow links (net)


UNITS = {"gemm": "GFLOP/s", "loop": "Mloop/s"}


def rate_text(bps: Optional[float], compact: bool = False) -> str:
    if bps is None:
        return "-"
    for unit, div in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= div:
            break
    else:
        unit, div = "B/s", 1.0
    v = bps / div
    text = f"{v:.3g}" if v < 100 else f"{v:.0f}"
    return f"{text}{unit}" if compact else f"{text} {unit}"


def size_text(n: Optional[float]) -> str:
    if n is None:
        return "-"
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n / 1e3:.3g}k"


def ms_text(s: Optional[float]) -> str:
    return "-" if s is None else f"{s * 1e3:.3g}ms"


def ratio_text(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}x" if x >= 100 else f"{x:.3g}x"


def slot_figure(h: Host) -> Optional[float]:
    return statistics.median(h.compute) if h.compute else None


def net_figures(n: int, links: Sequence[Link]) -> Dict[int, Tuple[Optional[float], Optional[float]]]:
    """host -> (best sending bandwidth, best receiving bandwidth)."""
    out: Dict[int, List[Optional[float]]] = {i: [None, None] for i in range(n)}
    for ln in links:
        if ln.bw is None:
            continue
        for i, side in ((ln.src, 0), (ln.dst, 1)):
            best = out[i][side]
            if best is None or ln.bw > best:
                out[i][side] = ln.bw
    return {i: (v[0], v[1]) for i, v in out.items()}


def host_net(fig: Tuple[Optional[float], Optional[float]]) -> Optional[float]:
    vals = [v for v in fig if v is not None]
    return min(vals) if vals else None


def host_rtt(i: int, links: Sequence[Link]) -> Optional[float]:
    vals = [ln.rtt for ln in links if ln.rtt is not None and i in (ln.src, ln.dst)]
    return min(vals) if vals else None


def _low(values: Mapping[int, Optional[float]], threshold: float) -> Dict[int, Tuple[float, float]]:
    """index -> (value, median) for values ``threshold`` times below the median."""
    known = [v for v in values.values() if v is not None]
    if len(known) < 2:
        return {}
    med = statistics.median(known)
    return {i: (v, med) for i, v in values.items()
            if v is not None and med > 0 and (v == 0 or med / v >= threshold)}


def findings(hosts: Sequence[Host], links: Sequence[Link], threshold: float,
             min_free: float) -> List[Finding]:
    out: List[Finding] = []
    for kind in sorted({h.kind for h in hosts if h.kind}):
        figs = {i: slot_figure(h) for i, h in enumerate(hosts) if h.kind == kind}
        for i, (v, med) in _low(figs, threshold).items():
            out.append(Finding(i, "compute", v, med, med / v if v else float("inf"), UNITS[kind]))
    for i, (v, med) in _low({i: h.memory for i, h in enumerate(hosts)}, threshold).items():
        out.append(Finding(i, "memory", v, med, med / v if v else float("inf"), ""))
    rates = {i: (h.disk or {}).get("rate") for i, h in enumerate(hosts)}
    for i, (v, med) in _low(rates, threshold).items():
        out.append(Finding(i, "disk", v, med, med / v if v else float("inf"), ""))
    for i, h in enumerate(hosts):
        d = h.disk or {}
        if d.get("error"):
            out.append(Finding(i, "free", None, None, None, d["error"]))
        elif d.get("free") is not None and d["free"] < min_free:
            out.append(Finding(i, "free", d["free"], min_free, None, d.get("where", "")))
    for i, h in enumerate(hosts):
        cpus = usable_cpus(h)
        if cpus is not None and h.cpus and cpus < h.slots:
            src = h.cpus[2] if h.cpus[1] is not None and h.cpus[1] < h.cpus[0] else "affinity"
            out.append(Finding(i, "cpus", cpus, h.slots, None, src))
    counts = {i: device_count(h.devices) for i, h in enumerate(hosts)}
    if any(counts.values()):
        for i, h in enumerate(hosts):
            if counts[i] < h.slots:
                out.append(Finding(i, "devices", counts[i], h.slots, None, device_kind(h.devices)))
    bws = [ln.bw for ln in links if ln.bw is not None]
    if len(bws) >= 2:
        bw_med = statistics.median(bws)
        for i, fig in net_figures(len(hosts), links).items():
            bw = host_net(fig)
            if bw is not None and (bw == 0 or bw_med / bw >= threshold):
                slow = [ln for ln in links if i in (ln.src, ln.dst) and ln.bw is not None
                        and (ln.bw == 0 or bw_med / ln.bw >= threshold)]
                out.append(Finding(i, "net", bw, bw_med, bw_med / bw if bw else float("inf"), slow))
    rtts = [ln.rtt for ln in links if ln.rtt is not None]
    if len(rtts) >= 2:
        rtt_med = statistics.median(rtts)
        for i in range(len(hosts)):
            rtt = host_rtt(i, links)
            if rtt is not None and rtt >= threshold * rtt_med and rtt - rtt_med >= RTT_SLACK:
                out.append(Finding(i, "rtt", rtt, rtt_med, rtt / rtt_med if rtt_med else float("inf"), ""))
    return out


def usable_cpus(h: Host) -> Optional[float]:
    if not h.cpus:
        return None
    ncpu, limit = h.cpus[0], h.cpus[1]
    return min(ncpu, limit) if limit is not None else ncpu


def device_count(devices: Optional[Mapping]) -> int:
    d = devices or {}
    return max(len(d.get("davinci", [])), len(d.get("nvidia", [])))


def device_kind(devices: Optional[Mapping]) -> str:
    d = devices or {}
    return "/dev/davinci*" if d.get("davinci") else ("nvidia-smi -L" if d.get("nvidia") else "")


def merge_better(first: Sequence[Host], again: Mapping[int, Host]) -> List[Host]:
    """The better of two measurements of each re-measured host (figure by figure)."""
    out = list(first)
    for i, h in again.items():
        old = out[i]
        compute, kind = old.compute, old.kind
        new_fig, old_fig = slot_figure(h), slot_figure(old)   # None: no compute figures
        if new_fig is not None and (old_fig is None or new_fig > old_fig):
            compute, kind = h.compute, h.kind
        memory = max(v for v in (old.memory, h.memory, 0.0) if v is not None) or old.memory
        disk, new_disk = old.disk, h.disk or {}
        if new_disk.get("rate", 0) > (old.disk or {}).get("rate", 0):
            disk = dict(old.disk or {}, rate=new_disk["rate"])
        out[i] = old._replace(compute=compute, kind=kind, memory=memory, disk=disk)
    return out


def slow_links(links: Sequence[Link], threshold: float) -> List[tuple]:
    """(src, dst) of the links ``threshold`` times below the median link (or failed)."""
    bws = [ln.bw for ln in links if ln.bw is not None]
    med = statistics.median(bws) if bws else 0.0
    return [(ln.src, ln.dst) for ln in links
            if ln.bw is None or (len(bws) >= 2 and (ln.bw == 0 or med / ln.bw >= threshold))]


def merge_links(first: Sequence[Link], again: Sequence[Link]) -> List[Link]:
    """The links of both passes; a link measured twice keeps its better bandwidth and its
    better round trip (new links, such as a retest through a third host, are added)."""
    by = {(ln.src, ln.dst): ln for ln in first}
    for ln in again:
        old = by.get((ln.src, ln.dst))
        if old is None:
            by[(ln.src, ln.dst)] = ln
            continue
        best = ln if (ln.bw or 0) > (old.bw or 0) else old
        rtts = [r for r in (old.rtt, ln.rtt) if r is not None]
        by[(ln.src, ln.dst)] = best._replace(rtt=min(rtts) if rtts else None)
    return list(by.values())


def _what(f: Finding, hosts: Sequence[Host], brief: bool = False) -> str:
    if f.check in ("compute", "memory", "disk", "net"):
        name = {"compute": "compute", "memory": "memory copy", "disk": "log dir write",
                "net": "network"}[f.check]
        if f.check == "compute":
            v, m = f"{f.value:.3g} {f.detail} per slot", f"{f.median:.3g}"
        else:
            v, m = rate_text(f.value), rate_text(f.median)
        text = f"{name} {v}, median {m} ({ratio_text(f.ratio)} slower)"
        if f.check == "net" and isinstance(f.detail, list) and f.detail:   # the slow links
            show = f.detail[:1] if brief else f.detail[:4]
            names = ", ".join(f"{hosts[ln.src].name}→{hosts[ln.dst].name}" for ln in show)
            more = f" and {len(f.detail) - len(show)} more" if len(f.detail) > len(show) else ""
            text += f": link{'s' if len(show) > 1 else ''} {names}{more}"
        return text
    if f.check == "rtt":
        return f"round trip {ms_text(f.value)}, median {ms_text(f.median)} ({ratio_text(f.ratio)})"
    if f.check == "cpus":
        return f"{f.value:.3g} CPU(s) for {f.median} slot(s) ({f.detail})"
    if f.check == "free":
        if f.value is None:
            return f"log dir: {f.detail}"
        return f"log dir {f.detail}: {size_text(f.value)}B free, less than {size_text(f.median)}B"
    return f"{f.value} device(s) ({f.detail}) for {f.median} slot(s)"


def results(hosts: Sequence[Host], links: Sequence[Link], found: Sequence[Finding]) -> List[CheckResult]:
    """One result per host and deep column: FAIL with the finding, else OK with the figure."""
    bad: Dict[Tuple[int, str], Finding] = {(f.host, f.check): f for f in found}
    cells = table_cells(hosts, links, found)
    out = []
    for i, h in enumerate(hosts):
        for col in COLUMNS:
            f = bad.get((i, col))
            if f is not None:
                out.append(CheckResult(h.name, h.addr, col, WARN if col in WARN_ONLY else FAIL,
                                       (f"[{h.own}] " if h.own else "") + _what(f, hosts)))
            else:
                cell = cells[h.name][col]
                out.append(CheckResult(h.name, h.addr, col, SKIP if cell == "-" else OK, cell))
    return out


def table_cells(hosts: Sequence[Host], links: Sequence[Link], found: Sequence[Finding]) -> Dict[str, Dict[str, str]]:
    """host name -> column -> the figure, ``!`` after an outlier's."""
    bad = {(f.host, f.check) for f in found}
    figs = net_figures(len(hosts), links)
    out: Dict[str, Dict[str, str]] = {}
    for i, h in enumerate(hosts):
        fig = slot_figure(h)
        d = h.disk or {}
        n_dev = device_count(h.devices)
        cpus = usable_cpus(h)
        row = {
            "cpus": "-" if cpus is None else f"{cpus:.3g}",
            "compute": "-" if fig is None else f"{fig:.3g}{'GF/s' if h.kind == 'gemm' else 'Ml/s'}",
            "memory": rate_text(h.memory, compact=True),
            "disk": rate_text(d.get("rate"), compact=True) if "rate" in d else "-",
            "free": size_text(d["free"]) if d.get("free") is not None else "-",
            "devices": f"{n_dev}/{h.slots}" if n_dev else "-",
            "net": rate_text(host_net(figs[i]), compact=True),
            "rtt": ms_text(host_rtt(i, links)),
        }
        out[h.name] = {c: v + ("!" if (i, c) in bad and v != "-" else "") for c, v in row.items()}
    return out


def verdict(hosts: Sequence[Host], links: Sequence[Link], found: Sequence[Finding],
            threshold: float, seconds: float) -> str:
    """One line: no outlier, or each outlier host with what is slow and by how much."""
    found = [f for f in found if f.check not in WARN_ONLY]
    if not found:
        return (f"mpilaunch check --deep: no outlier beyond {threshold:g}x the median "
                f"({len(hosts)} host(s), {len(links)} link(s); {seconds:.1f}s)")
    by_host: Dict[int, List[Finding]] = {}
    for f in found:
        by_host.setdefault(f.host, []).append(f)
    parts = []
    for i, fs in sorted(by_host.items()):
        name = hosts[i].name + (f" [{hosts[i].own}]" if hosts[i].own else "")
        parts.append(f"{name}: " + ", ".join(_what(f, hosts, brief=True) for f in fs))
    return (f"mpilaunch check --deep: {len(by_host)} outlier host(s) beyond {threshold:g}x the "
            f"median — " + "; ".join(parts) + f" ({seconds:.1f}s)")
