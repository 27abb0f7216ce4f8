"""The rest of msrun's command line, checked for config.launchconfig.build: --bind_numa (the rule is
mpilaunch/rank/binding/affinity.py's), --sim_level / --sim_rank_id (MindSpore's DryRun, as msrun 2.x
takes them: mindspore/parallel/cluster/process_entity/_api.py), --rank_table_file and
--node_rank. UsageError naming the flag, before anything starts."""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Tuple

from mpilaunch import contract, net
from mpilaunch.errors import UsageError

if TYPE_CHECKING:
    from argparse import Namespace

    from mpilaunch.config.hostfile import Host


def bind_numa(value: Optional[str]) -> Optional[str]:
    """``--bind_numa`` checked (mpilaunch/rank/binding/affinity.py's rule) -> what the ranks get: True,
    or the JSON itself (a file's content: the other hosts need not have the file)."""
    if value is None:   # not asked for: the binding rules are loaded by the launches that bind
        return None
    from mpilaunch.rank.binding import affinity

    spec = affinity.parse_bind_numa(value, "--bind_numa")
    if spec is None or value is None:   # None: not asked for
        return None
    if spec == affinity.AUTO:
        return "True"
    import json

    text = value.strip()
    if not text.startswith("{"):
        with open(text, encoding="utf-8") as f:
            text = f.read()
    return json.dumps(json.loads(text), separators=(",", ":"), sort_keys=True)


def sim(args: Namespace, env: Mapping[str, str], np: int) -> Tuple[Optional[int], Optional[int]]:
    """(--sim_level 0-3, --sim_rank_id below np), as msrun 2.x takes them."""
    level = None
    if args.sim_level is not None:
        level = contract.whole(args.sim_level, "--sim_level", 0, 3,
                               fix="give 0, 1, 2 or 3 (MindSpore's simulation levels)")
    rank = None
    if args.sim_rank_id is not None:
        if level is None and not env.get("MS_SIMULATION_LEVEL", "").strip():
            raise UsageError(f"--sim_rank_id={args.sim_rank_id}: only with --sim_level (or "
                             "MS_SIMULATION_LEVEL): it picks the one rank DryRun simulates")
        rank = contract.whole(args.sim_rank_id, "--sim_rank_id", 0, np - 1,
                              fix=f"give a rank of the simulated job, 0 to {np - 1} (-np {np})")
    return level, rank


def rank_table(value: Optional[str]) -> Optional[str]:
    """``--rank_table_file``: a readable file -> its absolute path (what RANK_TABLE_FILE says
    in every process; the ranks may start elsewhere than this shell's directory)."""
    if value is None:
        return None
    if not os.path.isfile(value) or not os.access(value, os.R_OK):
        why = "no such file" if not os.path.exists(value) else "not a readable file"
        raise UsageError(f"--rank_table_file={value!r}: {why}; give the path of the Ascend rank "
                         "table JSON")
    return os.path.abspath(value)


def node_rank_note(setting: Tuple[Any, str], hosts: Sequence[Host]) -> None:
    """``--node_rank`` (msrun: this node's index; torchrun's ``--node-rank``, Kubeflow
    Trainer's ``PET_NODE_RANK``), as (value, source), is accepted; under one mpirun (or srun)
    every host's index is the starter's, so a value that is not this host's is said once, here."""
    value, source = setting
    if value is None:
        return
    n = contract.whole(value, source, -1)

    here = next((i for i, h in enumerate(hosts) if net.is_here(h)), None)
    if n in (-1, here):
        return
    where = (f"this host is node {here} of {len(hosts)}" if here is not None
             else "this host is not one of the job's hosts")
    sys.stderr.write(f"mpilaunch: {source}={n} ignored: under one mpirun each host's node "
                     f"index (GROUP_RANK, NODE_RANK) is the starter's (mpirun's); {where}\n")
