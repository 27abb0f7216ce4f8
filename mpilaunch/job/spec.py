"""The job as the platform describes it: ``VC_WORKER_HOSTS``, ``VC_TASK_INDEX``, and the same
``MA_NUM_GPUS`` / ``SSHD_PORT`` / ``--ssh-args`` answers as a plain launch (``mpilaunch.config.launchconfig``),
so ``mpilaunch job`` and ``mpilaunch`` never disagree about a variable. Pure."""
from __future__ import annotations

import argparse
import hashlib
import sys
from collections import namedtuple
from typing import List, Mapping, Optional, Sequence

from mpilaunch import contract
from mpilaunch.config import launchconfig
from mpilaunch.config import hostfile as hf
from mpilaunch.errors import UsageError


class JobSpec(namedtuple("JobSpec", "hosts index slots ssh_port ssh_extra key ports",
                         defaults=((),))):
    """hosts: tuple of names (index 0 = worker-0); index: this host's; slots: per host;
    ssh_port: Optional[int]; ssh_extra: tuple of ssh options; key: see :func:`job_key`;
    ports: each host's own ssh port or None (``VC_WORKER_HOSTS=a@2201,a@2202``).
    (Not a typing.NamedTuple: its field ``index`` hides tuple.index, which a checker refuses.)"""

    __slots__ = ()

    def port(self, index: int) -> Optional[int]:
        """Host ``index``'s ssh port: its own, else ``SSHD_PORT``/``--ssh-port``."""
        own = self.ports[index] if index < len(self.ports) else None
        return own if own is not None else self.ssh_port

    def entries(self) -> List[hf.Host]:
        """The hosts as hostfile entries (their own ports kept)."""
        return [hf.Host(h, self.slots, None, self.ports[i] if i < len(self.ports) else None)
                for i, h in enumerate(self.hosts)]

    @property
    def worker0(self) -> str:
        return self.hosts[0]

    def socket_name(self, index: int) -> str:
        """The abstract unix socket host ``index`` waits on (per network namespace)."""
        return f"mpilaunch-job-{self.key}-{index}"


def log(message: str) -> None:
    """``mpilaunch job``'s own lines on stderr."""
    print(f"mpilaunch: {message}", file=sys.stderr, flush=True)


def job_key(hosts: Sequence[str], ssh_port: Optional[int], job_id: str = "",
            ports: Sequence[Optional[int]] = ()) -> str:
    """Tells two jobs apart: hashes the host list (with their own ports), the ssh port and
    ``MPILAUNCH_JOB_ID``."""
    if any(p is not None for p in ports):
        hosts = [f"{h}@{p}" if p is not None else h for h, p in zip(hosts, ports)]
    text = "\n".join([",".join(hosts), str(ssh_port or ""), job_id])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def job_spec(env: Mapping[str, str], args: argparse.Namespace) -> Optional[JobSpec]:
    """The platform's description of the job, or None when no platform variables are set."""
    raw_hosts = env.get("VC_WORKER_HOSTS", "")
    raw_index = env.get("VC_TASK_INDEX")
    if not raw_hosts.strip():
        if raw_index is not None and raw_index.strip():
            raise UsageError(f"VC_TASK_INDEX={raw_index} is set but VC_WORKER_HOSTS is not; "
                             "set both (or neither, for a plain launch)")
        return None
    if args.hostfile is not None or args.host is not None:
        raise UsageError("mpilaunch job takes its hosts from VC_WORKER_HOSTS; drop --hostfile/-H "
                         "(or unset VC_WORKER_HOSTS for a plain launch)")
    slots = launchconfig.slots_per_host(args, env)
    found = hf.hosts_from_vc_worker_hosts(raw_hosts, slots)
    hosts, ports = tuple(h.name for h in found), tuple(h.port for h in found)
    if raw_index is None or not raw_index.strip():
        raise UsageError(f"VC_TASK_INDEX is not set (VC_WORKER_HOSTS lists {len(hosts)} hosts): "
                         "every host needs its index, 0 for worker-0")
    index = contract.whole(raw_index, "VC_TASK_INDEX", 0, len(hosts) - 1,
                           fix=f"give this host's index in VC_WORKER_HOSTS ({len(hosts)} hosts), "
                               f"0 to {len(hosts) - 1}")
    port = launchconfig.ssh_port(args, env)
    key = job_key(hosts, port, env.get("MPILAUNCH_JOB_ID", ""), ports)
    return JobSpec(hosts, index, slots, port, launchconfig.ssh_extra(args), key,
                   ports if any(p is not None for p in ports) else ())
