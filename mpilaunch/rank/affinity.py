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

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Sequence, Tuple, Union

from mpilaunch.errors import UsageError

AUTO = "auto"
if TYPE_CHECKING:
    Spec = Union[None, str, Dict[str, List[int]]]

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
    if text.lower() in ("false", "0", "no", "off", ""):
        return None
    if text.lower() in ("true", "1", "yes", "on"):
        return AUTO
    try:
        import json

        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"neither True/False nor JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError("the JSON is not a dict")
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
