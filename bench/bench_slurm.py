"""Launch time inside one Slurm allocation: mpilaunch (mpirun path and ``--launcher srun``)
against bare ``srun`` and bare ``mpirun`` in the same allocation.

Starts the test Slurm (tests/helpers/slurm/cluster.py: munged + slurmctld + slurmd on this machine,
4 task slots), submits ONE batch job with ``-n N`` that runs every variant ROUNDS times,
interleaved, and timed inside the job (so allocation and scheduling are outside the figures):

* ``bare srun``: ``srun --mpi=pmix -n N python -S -c pass``
* ``bare mpirun``: ``<wheel mpirun> -np N python -S -c pass`` (Open MPI 5 takes the Slurm
  allocation itself)
* ``mpilaunch``: ``python -m mpilaunch --no-scheduler --tail_worker_log none noop.py``
* ``mpilaunch --launcher srun``: the same with srun starting the adapters

``BENCH_BASELINE=DIR`` (a checkout of an older commit, e.g. ``git archive``) adds ``before:``
variants that run that checkout's mpilaunch, interleaved with the others in the same job.

Run: ``python3 bench/bench_slurm.py [N] [ROUNDS] [NODES]`` (root, Slurm installed:
scripts/setup_slurm.sh). Prints the median and min per variant in seconds. NODES=2: the
multi-node test Slurm instead (tests/helpers/slurm/multinode.py: a slurmd in each of 2 namespace test
hosts, brought up here and torn down after), job ``-N2 --ntasks-per-node=N/2``.

Measured 2026-11-30 (2 cores, Slurm 22.05.8, Open MPI 5.0.11 wheel, one node), N=2, 7 rounds:
bare srun 0.158 s, bare mpirun 0.034 s (one node: no daemons), mpilaunch (mpirun) 0.209 s,
mpilaunch --launcher srun 0.458 s. Both mpilaunch variants use ``--master_port 0``, which makes
the adapters agree over MPI (MPI_Init under srun's PMIx is the larger share of the srun gap).

Measured 2026-11-30, 2 nodes (``bench_slurm.py 4 7 2``: 2 namespace hosts x 2 tasks, load
2.4-5, two runs): bare srun 0.286 / 0.261 s, bare mpirun 0.185 / 0.142 s, mpilaunch (mpirun)
1.503 / 1.557 s, --launcher srun 1.768 / 1.626 s, --master_addr given 1.472 s. Spanning nodes,
every adapter still MPI_Inits to learn its node index (agree.node_from_plan is written but
not wired into rank/__main__.py), so giving rank 0's address alone does not help.

Measured 2026-11-30, 2 nodes, after rank 0's address came from Slurm's NodeAddr (no adapter
MPI_Inits; ``BENCH_BASELINE`` = the commit before, same job, 7 interleaved rounds, load 0.8,
two runs): mpilaunch (mpirun) 1.000 / 1.068 s before -> 0.440 / 0.452 s, --launcher srun
1.108 / 1.070 s -> 0.520 / 0.510 s, --master_addr given 0.418 / 0.423 s; bare srun 0.186 /
0.191 s, bare mpirun 0.105 / 0.090 s.
"""
import os
import shlex
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))

from helpers.slurm.cluster import SlurmCluster, missing_prereqs  # noqa: E402

PY = sys.executable
MPIRUN = os.path.join(os.path.dirname(PY), "mpirun")


def variants(noop, base=None):
    args = ["--no-scheduler", "--tail_worker_log", "none", "--master_port", "0", "--log_dir",
            os.path.dirname(noop)]
    ml = [PY, "-m", "mpilaunch"] + args
    before = {}
    if base:   # another checkout (BENCH_BASELINE), interleaved in the same job: before/after
        old = ["env", "-C", base, PY, "-m", "mpilaunch"] + args
        before = {"before: mpilaunch (mpirun)": old + [noop],
                  "before: --launcher srun": old + ["--launcher", "srun", noop]}
    return {**before,
        "bare srun": ["srun", "--mpi=pmix", "-n", "$N", PY, "-S", "-c", "pass"],
        "bare mpirun": [MPIRUN, "-np", "$N", "--allow-run-as-root", PY, "-S", "-c", "pass"],
        "mpilaunch (mpirun)": ml + [noop],
        "mpilaunch --launcher srun": ml + ["--launcher", "srun", noop],
        # rank 0's address given (as the launcher now derives it from Slurm's NodeAddr)
        "mpilaunch --master_addr": ml + ["--master_addr", "$ADDR", noop],
    }


def job_script(names_argv, rounds, n):
    lines = ["N=%d" % n, "cd %s" % shlex.quote(REPO),
             "ADDR=$(hostname -I | cut -d' ' -f1)"]     # this node's (rank 0's) address
    lines.append("for r in $(seq %d); do" % rounds)
    for name, argv in names_argv.items():
        cmd = " ".join(a if a in ("$N", "$ADDR") else shlex.quote(a) for a in argv)
        lines.append('  t0=$(date +%%s.%%N); %s >/dev/null 2>&1 || echo "FAIL %s"; t1=$(date +%%s.%%N)'
                     % (cmd, name))
        lines.append('  echo "T|%s|$t0|$t1"' % name)
    lines.append("done")
    return "\n".join(lines) + "\n"


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 2
    rounds = int(argv[2]) if len(argv) > 2 else 7
    why = missing_prereqs()
    if why:
        print("bench_slurm: skipped:", why)
        return 0
    work = tempfile.mkdtemp(prefix="bench-slurm-")
    noop = os.path.join(work, "noop.py")
    with open(noop, "w") as f:
        f.write("pass\n")
    nodes = int(argv[3]) if len(argv) > 3 else 1
    os.chmod(work, 0o755)
    prefix = None
    try:
        if nodes > 1:
            from helpers import hosts
            from helpers.fixtures_hosts import SESSION_PREFIXES, TestHosts
            from helpers.slurm.multinode import SlurmNodes

            prefix = next(p for p in SESSION_PREFIXES[::-1] if not hosts.prefix_in_use(p))
            th = TestHosts(hosts.up(nodes, prefix=prefix, owner_pid=os.getpid()))
            cluster = SlurmNodes(th, n=nodes, cpus=max(1, n // nodes)).start(timeout=60)
            opts = ["-N", str(nodes), "--ntasks-per-node", str(n // nodes)]
        else:
            cluster, opts = SlurmCluster(cpus=4).start(), ["-n", str(n)]
        try:
            env = cluster.env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            base = os.environ.get("BENCH_BASELINE")
            job, rc, out = cluster.sbatch(job_script(variants(noop, base), rounds, n), opts,
                                          env=env, timeout=600)
            text = open(out).read()
        finally:
            cluster.stop()
    finally:
        if prefix:
            hosts.down(prefix)
    times = {}
    for line in text.splitlines():
        if line.startswith("T|"):
            _, name, t0, t1 = line.split("|")
            times.setdefault(name, []).append(float(t1) - float(t0))
    fails = [line for line in text.splitlines() if line.startswith("FAIL")]
    print("launch time inside one Slurm allocation, N=%d on %d node(s), %d interleaved rounds "
          "(job %s, rc %s)" % (n, nodes, rounds, job, rc))
    for name, ts in times.items():
        print("  %-28s median %.3f s  min %.3f s" % (name, statistics.median(ts), min(ts)))
    if fails:
        print("  failures:", len(fails), fails[:3])
    return 1 if fails else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
