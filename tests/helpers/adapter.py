"""Running the rank adapter alone (no mpirun) in the tests of tests/rank/: the test worker,
a faked rank environment, the adapter's status lines and what each child recorded."""
import json
import os
import sys

from helpers import REPO
from mpilaunch.contract import LIFE_CAUSE, STATUS_PREFIX as PREFIX

# The test worker: what it does is read from T_<ROLE>_<RANK> or T_<ROLE> (ROLE = WORKER or
# SCHED), a ';' list of steps. It always records its env, pid and CPU affinity first.
WORKER_SCRIPT = r'''
import json, os, signal, subprocess, sys, time
role = "sched" if os.environ.get("MS_ROLE") == "MS_SCHED" else "worker"
rank = os.environ.get("RANK_ID", "x")
d = os.environ["T_DIR"]
tag = f"{role}_{rank}"
with open(os.path.join(d, f"info_{tag}.json.tmp"), "w") as f:
    json.dump({"env": dict(os.environ), "pid": os.getpid(), "argv": sys.argv,
               "affinity": sorted(os.sched_getaffinity(0))}, f)
os.rename(os.path.join(d, f"info_{tag}.json.tmp"), os.path.join(d, f"info_{tag}.json"))
spec = os.environ.get(f"T_{role.upper()}_{rank}") or os.environ.get(f"T_{role.upper()}") or "exit:0"
for step in spec.split(";"):
    op, _, arg = step.partition(":")
    if op == "print":
        print(arg, flush=True)
    elif op == "printenv":
        print(os.environ[arg], flush=True)
    elif op == "err":
        print(arg, file=sys.stderr, flush=True)
    elif op == "lines":
        for i in range(int(arg)):
            print(f"{tag} line {i}")
        sys.stdout.flush()
    elif op == "sleep":
        time.sleep(float(arg))
    elif op == "exit":
        sys.exit(int(arg))
    elif op == "kill":
        os.kill(os.getpid(), int(arg))
    elif op == "child":
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open(os.path.join(d, f"grandchild_{tag}"), "w") as f:
            f.write(str(p.pid))
    elif op == "await":                 # wait until <arg> (e.g. sched_0) has recorded itself:
        end = time.time() + 30          # a fast worker must not end the job before the
        while time.time() < end and not os.path.exists(os.path.join(d, f"info_{arg}.json")):
            time.sleep(0.02)            # scheduler it asserts on has even started
    elif op == "waitfile":              # wait until every rank has recorded itself
        end = time.time() + 30
        while time.time() < end and len([n for n in os.listdir(d)
                                          if n.startswith("info_worker_") and n.endswith(".json")]) < int(arg):
            time.sleep(0.05)
'''


def write_worker(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return str(script), str(out)


def adapter_cmd(*opts, script, args=()):
    return [sys.executable, "-m", "mpilaunch.rank", *opts, "--", script, *args]


def fake_rank_env(rank=0, size=1, local_rank=None, local_size=None, **extra):
    env = dict(os.environ)
    env.update({"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank if local_rank is None else local_rank),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(size if local_size is None else local_size),
                "PYTHONPATH": REPO})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def status_lines(stderr: str, life: bool = False):
    """The adapter's status lines; its lifecycle lines (cause "life": up, started, first
    output, exit 0, for the launcher's event record) only with ``life``."""
    lines = [json.loads(line[len(PREFIX):]) for line in stderr.splitlines()
             if line.startswith(PREFIX)]
    return [x for x in lines if life or x.get("cause") != LIFE_CAUSE]


def infos(out_dir):
    res = {}
    for name in os.listdir(out_dir):
        if name.startswith("info_") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                res[name[5:-5]] = json.load(f)
    return res

