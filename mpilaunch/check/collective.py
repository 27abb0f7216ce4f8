"""``mpilaunch check --deep --collective gloo|nccl``: one torch.distributed allreduce across
every host's agent, timed. Job-wide: a collective runs at the pace of its slowest member, so
it says how fast the job's collectives can be, not which host is slow (the per-host figures
of check/deep.py do that). Off by default: importing torch costs each host 1-2 s of CPU."""
from __future__ import annotations

import statistics
from typing import Sequence

from mpilaunch import ssh
from mpilaunch.check.outliers import rate_text

BYTES = 4 << 20
ITERS = 5
# Run by each agent (check/agent.py, op allreduce) with the command as its argument.
CODE = (
    "import json,os,sys,time\n"
    "import torch, torch.distributed as dist\n"
    "c=json.loads(sys.argv[1])\n"
    # an IPv6 master goes into the URL in brackets (its colons would end the host part)
    "m=c['master']; m='[%s]' % m if ':' in m else m\n"
    "dist.init_process_group(c['backend'], init_method='tcp://%s:%d' % (m, c['mport']),"
    " rank=c['rank'], world_size=c['world'])\n"
    "dev='cuda' if c['backend']=='nccl' else 'cpu'\n"
    "x=torch.ones(c['bytes']//4, device=dev); dist.all_reduce(x); t=[]\n"
    "for _ in range(c['iters']):\n"
    "    s=time.monotonic(); dist.all_reduce(x)\n"
    "    if dev=='cuda': torch.cuda.synchronize()\n"
    "    t.append(time.monotonic()-s)\n"
    "dist.destroy_process_group(); print(json.dumps(t))\n")


def allreduce(agents: Sequence, backend: str, timeout: float) -> str:
    """-> one line: the median time of one allreduce of BYTES, and its algorithm bandwidth."""
    missing = [a.name for a in agents if not a.hello.get("torch")]
    if missing:
        return (f"deep: allreduce ({backend}) skipped: torch is not importable with the rank "
                f"interpreter on {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
    limit = max(60.0, 6 * timeout)
    try:
        port = agents[0].ask({"op": "spare_port"}, timeout)["port"]
    except Exception as exc:  # noqa: BLE001 - deep.AgentError, without importing deep
        return f"deep: allreduce ({backend}) not run: {agents[0].name}: {exc}"
    cmd = {"op": "allreduce", "code": CODE, "backend": backend, "master": agents[0].addr, "mport": port,
           "world": len(agents), "bytes": BYTES, "iters": ITERS, "timeout": limit}
    answers = ssh.parallel_map(lambda a: a.ask(dict(cmd, rank=a.index), limit + 5), agents,
                               len(agents))
    timed = []
    for a, ans in zip(agents, answers):
        if isinstance(ans, BaseException):
            return f"deep: allreduce ({backend}) failed on {a.name}: {ans}"
        if ans.get("error"):
            return f"deep: allreduce ({backend}) failed on {a.name}: {ans['error']}"
        timed.append(ans)
    per = statistics.median(max(ans["times"][k] for ans in timed) for k in range(ITERS))
    return (f"deep: allreduce ({backend}, {len(agents)} hosts, {BYTES >> 20} MiB float32): "
            f"{per * 1e3:.3g} ms each, {rate_text(BYTES / per)} algorithm bandwidth")
