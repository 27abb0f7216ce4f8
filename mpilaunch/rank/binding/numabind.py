"""``--bind-numa``, done: the few lines that run between the adapter and a worker (or the
scheduler) it binds, then exec it. rank/plan.py puts ``python -S -c`` of :data:`ENTRY` in
front of the child's argv; this reads the host's NUMA topology, plans with
mpilaunch/rank/binding/affinity.py (the same rule the launcher checked), and binds:

* with ``numactl`` on PATH: ``exec numactl --membind=N [--physcpubind=CPUS] -- ARGV``
  (msrun's way);
* without (as on the test machine): ``sched_setaffinity`` and ``set_mempolicy(MPOL_BIND)``
  through ctypes (libnuma's wrapper when libnuma.so.1 is there, else the syscall), then
  ``exec ARGV``. Both survive exec and are inherited by the worker's own children.

A node this host does not have: one line on stderr and exit 2, before the worker starts.
"""
import os
import sys

TYPE_CHECKING = False   # no typing at run time: this runs in every bound worker's start
if TYPE_CHECKING:
    from typing import Iterable, List, Optional, Sequence

# ``python -S -c ENTRY PKG_PARENT ARGS...``: no site (docs/ARCHITECTURE.md, start-up)
ENTRY = ("import sys; sys.path.insert(0, sys.argv[1]); from mpilaunch.rank.binding import numabind; "
         "sys.exit(numabind.main(sys.argv[2:]))")
MPOL_BIND = 2
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270}


def prefix(python: str, spec_text: str, role: str, local_rank: int, local_size: int,
           device_id: str, keep_cpus: bool) -> "List[str]":
    """The argv to put before the child's (``keep_cpus``: --bind-core chose its CPUs)."""
    parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    return [python, "-S", "-c", ENTRY, parent, spec_text, role, str(local_rank),
            str(local_size), device_id, "keep" if keep_cpus else "numa", "--"]


def set_membind(nodes: "Sequence[int]") -> None:
    """``set_mempolicy(MPOL_BIND, nodes)`` for this process (OSError on failure)."""
    import ctypes

    longs = max(nodes) // 64 + 1
    mask = (ctypes.c_ulong * longs)()
    for n in nodes:
        mask[n // 64] |= 1 << (n % 64)
    maxnode = longs * 64 + 1          # the kernel reads maxnode - 1 bits
    try:
        lib = ctypes.CDLL("libnuma.so.1", use_errno=True)
        rc = lib.set_mempolicy(MPOL_BIND, mask, ctypes.c_ulong(maxnode))
    except (OSError, AttributeError):
        number = SYS_SET_MEMPOLICY.get(os.uname().machine)
        if number is None:
            raise OSError(f"set_mempolicy: no syscall number known for {os.uname().machine}")
        lib = ctypes.CDLL(None, use_errno=True)
        rc = lib.syscall(number, MPOL_BIND, mask, ctypes.c_ulong(maxnode))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"set_mempolicy: {os.strerror(err)}")


def _numactl() -> "Optional[str]":
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(d or ".", "numactl")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _ranges(values: "Iterable[int]") -> str:
    return ",".join(str(v) for v in values)


def main(argv: "List[str]") -> int:
    from mpilaunch.errors import UsageError
    from mpilaunch.rank.binding import affinity
    spec_text, role, local_rank, local_size, device_id, cpus_mode = argv[:6]
    cmd = argv[7:]
    try:
        spec = affinity.parse_bind_numa(spec_text)
        bind = affinity.plan_numa(spec, affinity.read_numa_topology(),
                                  sorted(os.sched_getaffinity(0)), role, int(local_rank),
                                  int(local_size), device_id)
    except UsageError as exc:
        sys.stderr.write(f"mpilaunch.rank: error: {exc}\n")
        return 2
    cpus = None if bind is None or cpus_mode == "keep" else bind.cpus
    mems = None if bind is None else bind.mem_nodes
    numactl = _numactl() if (cpus or mems) else None
    try:
        if numactl:
            opts = [f"--membind={_ranges(mems)}"] if mems else []
            opts += [f"--physcpubind={_ranges(cpus)}"] if cpus else []
            os.execv(numactl, [numactl, *opts, "--", *cmd])
        if cpus:
            os.sched_setaffinity(0, cpus)
        if mems:
            set_membind(mems)
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"mpilaunch.rank: error: --bind-numa: {exc}\n")
        return 2
    return 0  # pragma: no cover
