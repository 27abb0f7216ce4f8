"""Allocation discovery: the hosts and slots a batch scheduler or an MPI operator already gave
this job, read in one place before planning. Pure but for reading the operator's files.

Used by ``config.launchconfig._resolve_hosts`` only when no hostfile, ``-H`` or ``VC_WORKER_HOSTS`` was
given (those always win). First match wins:

1. **Slurm** (inside ``sbatch``/``salloc``): ``SLURM_JOB_ID`` with ``SLURM_JOB_NODELIST``
   (compressed, ``node[01-04,07]``, expanded by ``python-hostlist``, the library Slurm sites
   use) and ``SLURM_TASKS_PER_NODE`` (``2(x3),1``; else ``SLURM_JOB_CPUS_PER_NODE``, else 1
   per node). ``SLURM_NTASKS`` must agree with the sum when set.
2. **Kubeflow mpi-operator**: the launcher pod's ``OMPI_MCA_orte_default_hostfile`` (Open
   MPI; ``/etc/mpi/hostfile``, ``host slots=N`` lines), ``PRTE_MCA_prte_default_hostfile``
   (Open MPI 5), ``I_MPI_HYDRA_HOST_FILE`` / ``HYDRA_HOST_FILE`` (Intel MPI / MPICH, ``host:N``).
3. **Volcano**: the ``mpi`` plugin's ``MPI_HOST`` (comma list of worker hosts), else the ``svc``
   plugin's ``VC_<TASK>_HOSTS`` of the one worker task (``VC_MPIWORKER_HOSTS``), else its
   ``/etc/volcano/<task>.host`` file (one host a line); slots per host from
   ``--local_worker_num``/``MA_NUM_GPUS``, as for ``VC_WORKER_HOSTS``.
"""
import os
import re
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

from mpilaunch.config import hostfile as hf
from mpilaunch.contract import which
from mpilaunch.errors import UsageError

if TYPE_CHECKING:
    import subprocess

Slots = Union[int, Callable[[], int]]   # a count, or how to count them when needed

# Allocation.kind, and LaunchConfig.hosts_from for hosts found here
SLURM, KUBEFLOW, VOLCANO = "slurm", "kubeflow", "volcano"

# mpi-operator (v2beta1) sets the first for Open MPI's mpirun; the others are how Open MPI 5's
# PRRTE, Intel MPI and MPICH's Hydra are pointed at the same /etc/mpi/hostfile.
HOSTFILE_VARIABLES = ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile",
                      "I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE")
VOLCANO_DIR = "/etc/volcano"
_VC_HOSTS = r"^VC_([A-Z0-9_]+)_HOSTS$"   # compiled when a VC_ variable is there (re caches it)


class Allocation(NamedTuple):
    """What a scheduler or operator allocated to the job."""

    hosts: Tuple[hf.Host, ...]
    source: str                     # what --dry-run and messages say the hosts came from
    kind: str                       # SLURM | KUBEFLOW | VOLCANO
    job_id: Optional[str] = None    # the Slurm job id (None elsewhere)


def expand_nodelist(value: str, name: str = "SLURM_JOB_NODELIST") -> List[str]:
    """Slurm's compressed host list -> names, in Slurm's order (``a[1-2]-ib,b3`` ->
    ``a1-ib a2-ib b3``). python-hostlist is imported here only: every other launch skips it."""
    import hostlist

    try:
        names = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise UsageError(f"{name}={value!r}: not a Slurm host list ({exc})") from None
    if not names:
        raise UsageError(f"{name}={value!r}: lists no hosts")
    return names


def tasks_per_node(value: str, name: str) -> List[int]:
    """Slurm's ``2(x3),1`` -> ``[2, 2, 2, 1]``."""
    counts: List[int] = []
    for item in value.split(","):
        m = re.match(r"^\s*(\d+)\s*(?:\(x(\d+)\))?\s*$", item)
        if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < 1):
            raise UsageError(f"{name}={value!r}: not in Slurm's '2(x3),1' form")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def slurm_job_id(env: Mapping[str, str]) -> Optional[str]:
    """The id of the Slurm job this process runs in (SLURM_JOB_ID, else the older SLURM_JOBID
    that Slurm still sets), or None outside one."""
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None


def slurm(env: Mapping[str, str]) -> Optional[Allocation]:
    """The Slurm job this process runs in, or None outside one."""
    job = slurm_job_id(env)
    if not job:
        return None
    list_name = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    if not env.get(list_name):
        raise UsageError(f"SLURM_JOB_ID={job} but SLURM_JOB_NODELIST is not set: not inside a "
                         "Slurm allocation? give a hostfile or unset SLURM_JOB_ID")
    names = expand_nodelist(env[list_name], list_name)
    for count_name in ("SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"):
        if env.get(count_name):
            counts = tasks_per_node(env[count_name], count_name)
            break
    else:
        count_name, counts = "", [1] * len(names)
    if len(counts) != len(names):
        raise UsageError(f"{count_name}={env[count_name]!r} gives {len(counts)} node(s) but "
                         f"{list_name}={env[list_name]!r} lists {len(names)}")
    hosts = tuple(hf.Host(hf.check_name(n, list_name), c) for n, c in zip(names, counts))
    total = sum(counts)
    if env.get("SLURM_NTASKS") and env["SLURM_NTASKS"].strip() != str(total):
        raise UsageError(f"SLURM_NTASKS={env['SLURM_NTASKS']} but {count_name}="
                         f"{env[count_name]!r} adds up to {total}")
    source = f"Slurm job {job} ({list_name}={env[list_name]}"
    source += f", {count_name}={env[count_name]})" if count_name else ", 1 task per node)"
    return Allocation(hosts, source, SLURM, job)


def from_slurm(hosts_from: str) -> bool:
    """The hosts came from a Slurm allocation (``hosts_from``: LaunchConfig.hosts_from).
    Inside one, mpirun starts its daemons through Slurm, not ssh, and ``mpilaunch check``
    checks the allocation instead of ssh."""
    return hosts_from == SLURM


def node_addrs(text: str) -> Dict[str, str]:
    """``scontrol show node -o`` -> {NodeName: NodeAddr} (NodeAddr defaults to the name)."""
    out = {}
    for line in text.splitlines():
        name, addr = re.search(r"\bNodeName=(\S+)", line), re.search(r"\bNodeAddr=(\S+)", line)
        if name and addr:
            out[name.group(1)] = addr.group(1)
    return out


def slurm_node_addr(name: str, env: Mapping[str, str], timeout: float = 5.0,
                    run: Optional[Callable[..., "subprocess.CompletedProcess[str]"]] = None
                    ) -> Optional[str]:
    """Slurm's ``NodeAddr`` of node ``name`` (one ``scontrol show node -o NAME``; slurmctld
    knows it from slurm.conf: no DNS lookup here), or None when scontrol cannot tell. Asked by
    ``net.rank0_address`` only for a multi-node job whose rank 0 runs here."""
    import subprocess

    scontrol = which("scontrol", env.get("PATH", os.defpath))
    if not scontrol:
        return None
    try:
        out = (run or subprocess.run)([scontrol, "show", "node", "-o", name],
                                      stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      errors="replace", timeout=timeout, env=dict(env))
    except (OSError, subprocess.SubprocessError):
        return None
    return node_addrs(out.stdout).get(name)


def node_addr_lookup(hosts_from: str, env: Mapping[str, str]
                     ) -> Optional[Callable[[str], Optional[str]]]:
    """name -> Slurm's NodeAddr (:func:`slurm_node_addr`) when the hosts came from a Slurm
    allocation (``hosts_from``: LaunchConfig.hosts_from), else None."""
    if not from_slurm(hosts_from or ""):
        return None
    return lambda name: slurm_node_addr(name, env)


def kubeflow(env: Mapping[str, str]) -> Optional[Allocation]:
    """The hostfile an MPI operator pointed the MPI library at, or None."""
    for name in HOSTFILE_VARIABLES:
        path = env.get(name, "").strip()
        if path:
            return Allocation(tuple(hf.read_hostfile(path)), f"{name}={path}", KUBEFLOW)
    return None


def _read_host_lines(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None


def _count(slots: Slots) -> int:
    return slots() if callable(slots) else slots


def volcano(env: Mapping[str, str], slots: Slots, root: str = VOLCANO_DIR,
            listdir: Callable[[str], List[str]] = os.listdir) -> Optional[Allocation]:
    """Volcano's worker host list, or None. ``VC_WORKER_HOSTS`` itself is config's (it wins
    before any discovery); here the other task names. ``slots``: per host, or a function
    giving it (asked only when Volcano hosts are found: a bad MA_NUM_GPUS stays harmless
    elsewhere)."""
    if env.get("MPI_HOST", "").strip():
        hosts = hf.hosts_from_vc_worker_hosts(env["MPI_HOST"], _count(slots), "MPI_HOST")
        return Allocation(tuple(hosts), "MPI_HOST (Volcano mpi plugin)", VOLCANO)
    found = sorted(n for n in env if n.startswith("VC_") and re.match(_VC_HOSTS, n)
                   and "WORKER" in n and env[n].strip())
    if len(found) > 1:
        raise UsageError(f"several Volcano worker tasks ({', '.join(found)}): give --hostfile "
                         "or -H to say which hosts to use")
    if found:
        hosts = hf.hosts_from_vc_worker_hosts(env[found[0]], _count(slots), found[0])
        return Allocation(tuple(hosts), found[0], VOLCANO)
    try:
        files = sorted(f for f in listdir(root) if f.endswith(".host") and "worker" in f.lower())
    except OSError:
        return None
    if len(files) > 1:
        raise UsageError(f"several Volcano worker host files in {root} ({', '.join(files)}): "
                         "give --hostfile or -H to say which hosts to use")
    if not files:
        return None
    path = os.path.join(root, files[0])
    names = [line.split("#", 1)[0].strip() for line in _read_host_lines(path).splitlines()]
    names = [n for n in names if n]
    if not names:
        raise UsageError(f"{path}: lists no hosts")
    hosts = hf.hosts_from_vc_worker_hosts(",".join(names), _count(slots), path)
    return Allocation(tuple(hosts), path, VOLCANO)


def discover(env: Mapping[str, str], slots_per_host: Slots, volcano_root: str = VOLCANO_DIR,
             listdir: Callable[[str], List[str]] = os.listdir) -> Optional[Allocation]:
    """What the scheduler or operator allocated to this job, or None (then: this machine)."""
    return slurm(env) or kubeflow(env) or volcano(env, slots_per_host, volcano_root, listdir)


def in_slurm(env: Mapping[str, str]) -> bool:
    """This process runs inside a Slurm job (whatever the hosts came from: who may stop it)."""
    return slurm_job_id(env) is not None


# JobState of a Slurm job that the scheduler is ending -> what the summary says
_SLURM_STOPS = {
    "CANCELLED": "cancelled by the scheduler (scancel)",
    "TIMEOUT": "time limit reached",
    "DEADLINE": "deadline reached",
    "NODE_FAIL": "node lost",
    "PREEMPTED": "preempted by the scheduler",
    "BOOT_FAIL": "node lost (boot failure)",
    "OUT_OF_MEMORY": "out of memory",
}


def _seconds(value: str) -> Optional[int]:
    """Slurm's ``[days-][HH:]MM:SS`` -> seconds (None for UNLIMITED and the like)."""
    m = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$", value)
    if not m:
        return None
    d, h, mi, s = (int(x or 0) for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def slurm_stop_reason(text: str) -> Optional[str]:
    """``scontrol show job -o`` of our job -> why Slurm is ending it, or None. Asked while the
    batch script still runs, a job in COMPLETING is being ended by Slurm (measured, 22.05: after
    scancel the state is ``COMPLETING Reason=None`` until the script exits): a time limit when
    the run time has reached it, else a cancel."""
    state = re.search(r"\bJobState=(\S+)", text)
    field = {k: v for k, v in re.findall(r"\b(Reason|TimeLimit|RunTime)=(\S+)", text)}
    if state and state.group(1) == "COMPLETING":
        limit, ran = _seconds(field.get("TimeLimit", "")), _seconds(field.get("RunTime", ""))
        if field.get("Reason", "").startswith("Node"):
            return f"node lost (Reason={field['Reason']})"
        if limit is not None and ran is not None and ran >= limit:
            return f"time limit reached (TimeLimit={field['TimeLimit']})"
        return "cancelled by the scheduler (scancel)"
    if not state or state.group(1) not in _SLURM_STOPS:
        return None
    reason = re.search(r"\bReason=(\S+)", text)
    why = _SLURM_STOPS[state.group(1)]
    if state.group(1) == "TIMEOUT":
        why += f" (TimeLimit={field['TimeLimit']})" if "TimeLimit" in field else ""
    elif reason and reason.group(1) not in ("None", "(null)"):
        why += f" (Reason={reason.group(1)})"
    return why


def slurm_stop_cause(env: Mapping[str, str], timeout: float = 3.0) -> Optional[str]:
    """Asked after a stop signal inside a Slurm job: is Slurm ending the job, and why? (runs
    ``scontrol``; None when it cannot tell)."""
    import subprocess

    job = slurm_job_id(env)
    scontrol = which("scontrol", env.get("PATH", os.defpath))
    if not job or not scontrol:
        return None
    try:
        out = subprocess.run([scontrol, "show", "job", "-o", job], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=timeout, env=dict(env))
    except (OSError, subprocess.SubprocessError):
        return None
    why = slurm_stop_reason(out.stdout)
    return f"Slurm job {job}: {why}" if why else None
