"""Two checkouts of mpilaunch, the same launches, interleaved: what a change costs.

``BENCH_BASELINE=DIR`` is the checkout before the change (``git archive OLD | tar -x -C DIR``),
``BENCH_CANDIDATE=DIR`` the one after (default: this checkout). Each round runs, for each
checkout in turn, the launches of section 1 (bench_launch.py) at N ranks with the embedded
Open MPI 5: ``mpilaunch (default)`` and ``mpilaunch --no-scheduler --tail_worker_log none``
on ``examples/exit_at_once.py``, and a failing job (``fail``: rank 1 exits 1 at once, every
other rank torn down). Both checkouts run with ``PYTHONPATH`` at their tree, the same
interpreter, the same bytecode cache prefix (warmed by the first, discarded round).

Run: ``BENCH_BASELINE=/tmp/before python3 bench/bench_before_after.py [N] [ROUNDS]``
(default 4 and 15). Prints per variant the median wall time (and the quartiles) and the
median CPU of the whole process tree, before and after, and the difference of the medians.
"""
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common as C  # noqa: E402

FAIL = "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(1)\ntime.sleep(30)\n"


def variants(tree, np, work):
    script = os.path.join(C.EXAMPLES, "exit_at_once.py")
    fail = os.path.join(work, "fail.py")
    with open(fail, "w") as f:
        f.write(FAIL)
    base = [C.PY, "-m", "mpilaunch", "--mpirun", C.OMPI5, "-np", str(np),
            "--master_port", str(C.QUIET_PORT)]
    logs = os.path.join(work, "logs")
    return {
        "default": base + ["--log_dir", logs, script],
        "lean": base + ["--no-scheduler", "--tail_worker_log", "none", "--log_dir", logs, script],
        "fail": base + ["--no-scheduler", "--log_dir", logs, fail],
    }


def main(argv):
    np = int(argv[1]) if len(argv) > 1 else 4
    rounds = int(argv[2]) if len(argv) > 2 else 15
    trees = {"before": os.environ.get("BENCH_BASELINE"),
             "after": os.environ.get("BENCH_CANDIDATE") or C.REPO}
    if not trees["before"]:
        sys.exit("give BENCH_BASELINE=DIR (a checkout of the commit before the change)")
    root = tempfile.mkdtemp(prefix="bench-ba-")
    env0 = C.base_env()
    env0["PYTHONPYCACHEPREFIX"] = os.path.join(root, "pycache")
    runs = []
    for label, tree in trees.items():
        work = os.path.join(root, label)
        os.makedirs(work)
        env = dict(env0, PYTHONPATH=tree)
        for name, cmd in variants(tree, np, work).items():
            runs.append((f"{label} {name}", lambda rnd, c=cmd, e=env, w=work: C.timed_run(c, env=e, cwd=w)))
    load = os.getloadavg()
    res = C.interleave(runs, rounds, 1, lambda msg: None)
    print(f"N={np}, {rounds} rounds interleaved (+1 warm-up), load {load[0]:.2f} -> "
          f"{os.getloadavg()[0]:.2f}; before={trees['before']} after={trees['after']}")
    med = {}
    for name, r in res.items():
        walls = sorted(x.wall for x in r["runs"])
        cpus = [x.cpu for x in r["runs"]]
        q = statistics.quantiles(walls, n=4) if len(walls) > 1 else [walls[0]] * 3
        med[name] = statistics.median(walls), statistics.median(cpus)
        rcs = sorted({x.rc for x in r["runs"]})
        print(f"  {name:16s} wall {med[name][0]:.3f} s (q1 {q[0]:.3f}, q3 {q[2]:.3f})  "
              f"cpu {med[name][1]:.3f} s  rc {rcs}")
    for name in ("default", "lean", "fail"):
        b, a = med[f"before {name}"], med[f"after {name}"]
        print(f"  {name:8s} after - before: wall {a[0] - b[0]:+.3f} s, cpu {a[1] - b[1]:+.3f} s")


if __name__ == "__main__":
    main(sys.argv)
