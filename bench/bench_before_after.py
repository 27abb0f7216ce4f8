"""Two checkouts of mpilaunch, the same launches, interleaved: what a change costs.

``BENCH_BASELINE=DIR`` is the checkout before the change (``git archive OLD | tar -x -C DIR``),
``BENCH_CANDIDATE=DIR`` the one after (default: this checkout). Each round runs, for each
checkout in turn, the launches of section 1 (bench_launch.py) at N ranks with the embedded
Open MPI 5: ``mpilaunch (default)`` and ``mpilaunch --no-scheduler --tail_worker_log none``
on ``examples/exit_at_once.py``, and a failing job (``fail``: rank 1 exits 1 at once, every
other rank torn down). Both checkouts run with ``PYTHONPATH`` at their tree, the same
interpreter, the same bytecode cache prefix (warmed by the first, discarded round).

Each round also runs the two baselines of section 1 at the same N: bare mpirun (the argv
mpilaunch plans, rank command ``python SCRIPT``) and mpirun with the adapters (no front end),
so each launch's cost over bare mpirun is read in the same run (medians of the rounds' paired
differences). ``BENCH_MPIS=5,4.1`` adds Open MPI 4.1 (default: 5 only). ``BENCH_CLEAN=1`` runs
bare mpirun, mpirun with the adapters and each checkout's default launch once more in the same
rounds with section 1's clean-site interpreter (common.make_clean_python: the same Python and
packages without the start-up .pth files a normal install does not have; README, "Interpreter
start-up tax"), rows marked ``clean``.

Run: ``BENCH_BASELINE=/tmp/before python3 bench/bench_before_after.py [N] [ROUNDS]``
(default 4 and 15). Prints per variant the median wall time (and the quartiles) and the
median CPU of the whole process tree, before and after, the difference of the medians, and
each variant over bare mpirun.
"""
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_launch as L  # noqa: E402
import common as C  # noqa: E402

MPIS = {"5": C.OMPI5, "4.1": C.OMPI4}

FAIL = "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(1)\ntime.sleep(30)\n"


def variants(tree, np, work, mpirun=C.OMPI5, py=C.PY):
    script = L.SCRIPT
    fail = os.path.join(work, "fail.py")
    with open(fail, "w") as f:
        f.write(FAIL)
    base = [py, "-m", "mpilaunch", "--mpirun", mpirun, "-np", str(np),
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
    # cached bytecode under a prefix of this run's own, written in the warm-up round (with
    # PYTHONDONTWRITEBYTECODE left set, every interpreter would compile the stdlib again)
    C.setup_bytecode_cache(root)
    mpis = [m.strip() for m in os.environ.get("BENCH_MPIS", "5").split(",") if m.strip()]
    pys = [("", C.PY)]
    if os.environ.get("BENCH_CLEAN") == "1":
        clean = C.make_clean_python(root)
        if clean is None:
            sys.exit("BENCH_CLEAN=1: no clean-site interpreter (no start-up .pth to skip, or its venv failed)")
        pys.append((" clean", clean))
    runs = []
    for mpi in mpis:
        base_env = {}
        for tag, py in pys:
            base = L.commands(MPIS[mpi], np, os.path.join(root, f"ompi{mpi}{tag.strip()}"), py)
            base_env[py] = base["env"]
            for name, key in (("bare", L.V_BARE), ("adapters", L.V_ADAPTER)):
                runs.append((f"{mpi}{tag} {name}", lambda rnd, c=base[key], e=base["env"], w=root:
                             C.timed_run(c, env=e, cwd=w)))
        for label, tree in trees.items():
            for tag, py in pys:
                work = os.path.join(root, f"ompi{mpi}-{label}{tag.strip()}")
                os.makedirs(work)
                # the clean-site venv reaches the packages through a .pth line, which the
                # adapter's `python -S` does not read: bench_launch.commands' PYTHONPATH for it
                path = [tree] + ([] if py == C.PY else [base_env[py]["PYTHONPATH"]])
                env = dict(C.base_env(), PYTHONPATH=os.pathsep.join(path))
                for name, cmd in variants(tree, np, work, MPIS[mpi], py).items():
                    if tag and name != "default":
                        continue
                    runs.append((f"{mpi}{tag} {label} {name}",
                                 lambda rnd, c=cmd, e=env, w=work: C.timed_run(c, env=e, cwd=w)))
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
        print(f"  {name:22s} wall {med[name][0]:.3f} s (q1 {q[0]:.3f}, q3 {q[2]:.3f})  "
              f"cpu {med[name][1]:.3f} s  rc {rcs}")
    for mpi in mpis:
        for name in ("default", "lean", "fail"):
            b, a = med[f"{mpi} before {name}"], med[f"{mpi} after {name}"]
            print(f"  Open MPI {mpi} {name:8s} after - before: wall {a[0] - b[0]:+.3f} s, "
                  f"cpu {a[1] - b[1]:+.3f} s")
        for tag, _ in pys:
            bare = res[f"{mpi}{tag} bare"]
            for name in ("adapters", "before default", "after default"):
                dw = statistics.median(C.paired_deltas(res[f"{mpi}{tag} {name}"], bare))
                dc = statistics.median(C.paired_deltas(res[f"{mpi}{tag} {name}"], bare, key=lambda r: r.cpu))
                print(f"  Open MPI {mpi}{tag} {name:15s} over bare mpirun: wall {dw:+.3f} s, cpu {dc:+.3f} s")


if __name__ == "__main__":
    main(sys.argv)
