"""``--bind-core``: which CPUs the worker and the scheduler of this rank are pinned to. Pure
apart from :func:`read_numa_nodes` / :func:`available_cpus`.

Spec forms (msrun's):

* ``False`` / absent: no binding.
* ``True``: the CPUs this rank may use (``psutil.Process().cpu_affinity()``, ordered by
  NUMA node when ``/sys/devices/system/node`` lists several) are cut into contiguous,
  equal chunks, one per process started on this node: the scheduler (on node 0, when
  there is one) first, then the local workers by local rank. Contiguous chunks of a
  node-ordered list keep each process inside one NUMA node whenever the counts divide.
  With fewer CPUs than processes, worker *i* gets CPU ``i mod n`` and the scheduler is
  not bound.
* A JSON dict ``{"scheduler": ["0-1"], "device0": ["2-3"], "device1": ["4-5", "8"]}``:
  applied as given; a worker's key is ``device<DEVICE_ID>``; a missing key or an empty
  list means "do not bind that process".

Bad JSON, keys or ranges: :class:`UsageError` naming ``--bind-core``.
"""
from __future__ import annotations

import os
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from mpilaunch.errors import UsageError

AUTO = "auto"
if TYPE_CHECKING:
    Spec = Union[None, str, Dict[str, List[int]]]
    NumaSpec = Union[None, str, Dict[str, "NumaEntry"]]   # --bind-numa: None, AUTO or per key

_RANGE = r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$"     # re is imported where used: every rank
_KEY = r"^(scheduler|device\S+)$"                 # pays for each import at start


def parse_cpu_ranges(items: Sequence[str], where: str) -> List[int]:
    import re

    cpus: List[int] = []
    for item in items:
        if not isinstance(item, str):
            raise UsageError(f"{where}: {item!r} is not a string like \"0-3\"")
        for part in item.split(","):
            m = re.match(_RANGE, part)
            if not m:
                raise UsageError(f"{where}: {part!r} is not a CPU range like \"0-3\"")
            lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
            if hi < lo:
                raise UsageError(f"{where}: range {part!r} runs backwards")
            for c in range(lo, hi + 1):
                if c not in cpus:
                    cpus.append(c)
    return cpus


FIX = 'give True, False, or a dict like {"scheduler":["0-1"],"device0":["2-3"]}'


_NOT_A_SWITCH = object()


def _switch(text: str) -> Any:   # None, AUTO or the _NOT_A_SWITCH sentinel
    """msrun's True/False words (any case; empty is off): None (off), AUTO, or _NOT_A_SWITCH."""
    word = text.lower()
    if word in ("false", "0", "no", "off", ""):
        return None
    if word in ("true", "1", "yes", "on"):
        return AUTO
    return _NOT_A_SWITCH


def _json_dict(text: str, not_json: str) -> dict:
    """``text`` as a JSON object, or a UsageError that starts with ``not_json``."""
    import json   # only for a binding given as JSON (docs/ARCHITECTURE.md, start-up)

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{not_json} ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError("the JSON is not a dict")
    return data


def parse_bind_core(raw: Optional[str], cpu_count: Optional[int] = None,
                    name: str = "--bind-core") -> Spec:
    """None (off), ``AUTO``, or ``{key: [cpu, ...]}``; ``cpu_count`` (None = unchecked) bounds
    the CPUs. UsageError ``NAME=value: why; fix`` (the launcher checks with this same rule)."""
    try:
        return _parse_bind_core(raw, cpu_count)
    except UsageError as exc:
        raise UsageError(f"{name}={raw!r}: {exc}; {FIX}") from None


def _parse_bind_core(raw: Optional[str], cpu_count: Optional[int]) -> Spec:
    if raw is None:
        return None
    text = raw.strip()
    if _switch(text) is not _NOT_A_SWITCH:
        return _switch(text)
    data = _json_dict(text, "neither True/False nor JSON")
    import re

    out: Dict[str, List[int]] = {}
    for key, value in data.items():
        if not re.match(_KEY, str(key)):
            raise UsageError(f"key {key!r} is neither \"scheduler\" nor \"device<ID>\"")
        if not isinstance(value, list):
            raise UsageError(f"{key}: the value is not a list of CPU ranges")
        cpus = parse_cpu_ranges(value, key)
        if cpu_count is not None:
            bad = [c for c in cpus if c >= cpu_count]
            if bad:
                raise UsageError(f"{key}: CPU {bad[0]} does not exist (the host has "
                                 f"{cpu_count} CPUs, 0-{cpu_count - 1})")
        out[str(key)] = cpus
    return out


def order_by_numa(cpus: Sequence[int], numa_nodes: Sequence[Sequence[int]]) -> List[int]:
    """``cpus`` reordered node by node (CPUs in no node listed go last)."""
    allowed = set(cpus)
    out: List[int] = []
    for node in numa_nodes:
        out.extend(c for c in sorted(node) if c in allowed and c not in out)
    out.extend(c for c in sorted(cpus) if c not in out)
    return out


def plan_cpus(spec: Spec, cpus: Sequence[int], numa_nodes: Sequence[Sequence[int]],
              local_rank: int, local_size: int, scheduler_here: bool,
              device_id: str) -> Tuple[Optional[List[int]], Optional[List[int]]]:
    """(worker CPUs, scheduler CPUs) for this rank; None = do not bind."""
    if spec is None:
        return None, None
    if isinstance(spec, dict):
        worker = spec.get(f"device{device_id}") or None
        sched = (spec.get("scheduler") or None) if scheduler_here else None
        return worker, sched
    ordered = order_by_numa(cpus, numa_nodes) if len(numa_nodes) > 1 else sorted(cpus)
    n = len(ordered)
    if n == 0:
        return None, None
    slots = local_size + (1 if scheduler_here else 0)
    if n < slots:
        return [ordered[local_rank % n]], None
    chunks = [ordered[i * n // slots:(i + 1) * n // slots] for i in range(slots)]
    first = 1 if scheduler_here else 0
    return chunks[first + local_rank], (chunks[0] if scheduler_here else None)


def read_numa_nodes(root: str = "/sys/devices/system/node") -> List[List[int]]:
    import re

    nodes: List[List[int]] = []
    try:
        names = sorted((n for n in os.listdir(root) if re.fullmatch(r"node\d+", n)),
                       key=lambda n: int(n[4:]))
    except OSError:
        return nodes
    for name in names:
        try:
            with open(os.path.join(root, name, "cpulist")) as f:
                text = f.read().strip()
        except OSError:
            continue
        nodes.append(parse_cpu_ranges([text], name) if text else [])
    return nodes


def available_cpus() -> List[int]:
    try:
        import psutil

        return sorted(psutil.Process().cpu_affinity())
    except Exception:  # pragma: no cover - platform without affinity
        return sorted(os.sched_getaffinity(0))


# --------------------------------------------------------------------------- --bind-numa
#
# msrun's forms: True (each local rank to the NUMA node of its device, which is not known
# here, so spread evenly: local rank i of n on node i * nodes // n); a dict
# {"device0": [0], "device1": ["1"], "scheduler": [0]} (NUMA node ids, or ranges "0-1");
# a JSON file with that dict, or msrun 2.x's schema {"bind_config": {"bind_cpu_mode":
# "cpu"|"numa"|"none", "bind_memory_mode": "numa"|"none"}, "bind_cpu": {...},
# "bind_memory": {...}}. A worker's key is device<DEVICE_ID>; the scheduler is bound only by
# its own key (as in msrun). Each entry binds CPUs (the nodes' CPUs, or a CPU list) and
# memory (MPOL_BIND to the nodes): rank/binding/numabind.py does it, with numactl when it is there.

class NumaEntry(namedtuple("NumaEntry", "cpus cpu_nodes mem_nodes")):
    """CPUs (list or None), NUMA nodes whose CPUs to use, NUMA nodes for memory."""

    __slots__ = ()


NUMA_FIX = ('give True, False, a dict like {"device0":[0],"device1":[1]}, or a JSON file '
            'with one (or with msrun\'s "bind_config")')


def parse_bind_numa(raw: Optional[str], name: str = "--bind-numa") -> NumaSpec:
    """None (off), ``AUTO``, or ``{key: NumaEntry}``; a value naming a file is read. UsageError
    ``NAME=value: why; fix`` (the launcher checks with this same rule)."""
    try:
        return _parse_bind_numa(raw)
    except UsageError as exc:
        raise UsageError(f"{name}={raw!r}: {exc}; {NUMA_FIX}") from None


def _parse_bind_numa(raw: Optional[str]) -> NumaSpec:
    if raw is None:
        return None
    text = raw.strip()
    if _switch(text) is not _NOT_A_SWITCH:
        return _switch(text)
    if not text.startswith("{"):
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read the file: {exc.strerror}") from None
    data = _json_dict(text, "not JSON")
    if "bind_config" in data:
        return _msrun_schema(data)
    return {key: NumaEntry(None, nodes, nodes) for key, nodes in _node_map(data, "").items()}


def _node_map(data: object, where: str) -> Dict[str, List[int]]:
    """{key: [node, ...]} of a {"device<ID>"|"scheduler": nodes} dict."""
    import re

    if not isinstance(data, dict):
        raise UsageError(f"{where} is not a dict")
    out = {}
    for key, value in data.items():
        if not re.match(_KEY, str(key)):
            raise UsageError(f"{where}key {key!r} is neither \"scheduler\" nor \"device<ID>\"")
        items = value if isinstance(value, list) else [value]
        nodes = parse_cpu_ranges([str(v) if isinstance(v, int) else v for v in items],
                                 f"{where}{key}")
        if not nodes:
            raise UsageError(f"{where}{key}: no NUMA node given")
        out[str(key)] = nodes
    return out


def _msrun_schema(data: dict) -> dict:
    conf = data.get("bind_config")
    if not isinstance(conf, dict):
        raise UsageError("bind_config is not a dict")
    cpu_mode = str(conf.get("bind_cpu_mode", "none")).lower()
    mem_mode = str(conf.get("bind_memory_mode", "none")).lower()
    if cpu_mode not in ("cpu", "numa", "none"):
        raise UsageError(f"bind_cpu_mode {cpu_mode!r} is not cpu, numa or none")
    if mem_mode not in ("numa", "none"):
        raise UsageError(f"bind_memory_mode {mem_mode!r} is not numa or none")
    cpus, cpu_nodes, mem = {}, {}, {}
    if cpu_mode == "cpu":
        for key, value in (data.get("bind_cpu") or {}).items():
            main = value.get("main") if isinstance(value, dict) else None
            if not isinstance(main, str):
                raise UsageError(f"bind_cpu.{key}: give {{\"main\": \"0-3\"}} in cpu mode")
            cpus[key] = parse_cpu_ranges([main], f"bind_cpu.{key}")
    elif cpu_mode == "numa":
        cpu_nodes = _node_map(data.get("bind_cpu") or {}, "bind_cpu.")
    if mem_mode == "numa":
        mem = _node_map(data.get("bind_memory") or {}, "bind_memory.")
    keys = list(dict.fromkeys(list(cpus) + list(cpu_nodes) + list(mem)))
    return {k: NumaEntry(cpus.get(k), cpu_nodes.get(k), mem.get(k)) for k in keys}


class NumaBind(namedtuple("NumaBind", "cpus mem_nodes")):
    """What one process is bound to: CPUs (None: leave them) and memory nodes (None: leave)."""

    __slots__ = ()


def read_numa_topology(root: str = "/sys/devices/system/node") -> Dict[int, List[int]]:
    """{node id: its CPUs} from a sysfs-shaped directory (node<N>/cpulist)."""
    import re

    out: Dict[int, List[int]] = {}
    try:
        names = [n for n in os.listdir(root) if re.fullmatch(r"node\d+", n)]
    except OSError:
        return out
    for name in sorted(names, key=lambda n: int(n[4:])):
        try:
            with open(os.path.join(root, name, "cpulist")) as f:
                text = f.read().strip()
        except OSError:
            continue
        out[int(name[4:])] = parse_cpu_ranges([text], name) if text else []
    return out


def plan_numa(spec: NumaSpec, topology: Dict[int, List[int]], allowed: Sequence[int],
              role: str, local_rank: int, local_size: int, device_id: str) -> Optional[NumaBind]:
    """What ``role`` (worker | scheduler) of this rank is bound to (None: nothing); a node
    the host does not have is a UsageError naming it."""
    if spec is None or not topology:
        return None
    ids = sorted(topology)
    if spec == AUTO:
        if role != "worker":
            return None
        node = ids[local_rank * len(ids) // max(1, local_size)]
        entry = NumaEntry(None, [node], [node])
        key = "True"
    else:
        key = "scheduler" if role == "scheduler" else f"device{device_id}"
        got = spec.get(key) if isinstance(spec, dict) else None
        if got is None:
            return None
        entry = got
    for nodes in (entry.cpu_nodes, entry.mem_nodes):
        bad = [n for n in nodes or () if n not in topology]
        if bad:
            have = ",".join(map(str, ids))
            raise UsageError(f"--bind-numa: {key}: NUMA node {bad[0]} does not exist (this host "
                             f"has node(s) {have})")
    cpus = entry.cpus
    if entry.cpu_nodes:
        cpus = [c for n in entry.cpu_nodes for c in topology[n] if c in set(allowed)]
        if not cpus:
            raise UsageError(f"--bind-numa: {key}: none of NUMA node(s) "
                             f"{entry.cpu_nodes}'s CPUs may be used by this rank")
    return NumaBind(cpus, entry.mem_nodes)


def check_numa_nodes(spec: NumaSpec, topology: Dict[int, List[int]], name: str = "--bind-numa") -> None:
    """Every NUMA node ``spec`` names exists in ``topology`` (the launcher's check when all
    ranks run on its machine, as for --bind_core's CPUs)."""
    if not isinstance(spec, dict) or not topology:
        return
    have = ",".join(map(str, sorted(topology)))
    for key, entry in spec.items():
        for n in (entry.cpu_nodes or []) + (entry.mem_nodes or []):
            if n not in topology:
                raise UsageError(f"{name}: {key}: NUMA node {n} does not exist (this host has "
                                 f"node(s) {have})")
