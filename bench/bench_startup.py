"""The N=4 launch overhead over bare mpirun, on both Open MPIs, for one or more checkouts side by
side (section 1's variants at N=4 only, more rounds): bare mpirun (the argv mpilaunch plans,
rank command ``python SCRIPT``), mpirun with the adapters (no front-end), and ``mpilaunch`` from
each checkout given (its ``mpilaunch/`` first on ``PYTHONPATH``), with cached bytecode as an
installed package has it (common.setup_bytecode_cache: a cache of this run's own, nothing written
into a checkout; the warm-up round fills it for the interpreters' own modules).

Every round runs every variant once, in an order rotated each round; the figures are medians
over the rounds of each variant's difference to the same round's bare mpirun (wall, and the CPU
of the whole reaped process tree), with the load average before and after.

    python3 bench/bench_startup.py --rounds 21                       # this checkout
    python3 bench/bench_startup.py --rounds 21 . /path/to/other/checkout
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_launch as L  # noqa: E402
import common as C  # noqa: E402


def _compiled(checkout: str) -> str:
    """``checkout``'s package compiled into the run's bytecode cache; -> the directory to put
    on PYTHONPATH."""
    root = os.path.abspath(checkout)
    if not os.path.isfile(os.path.join(root, "mpilaunch", "__init__.py")):
        raise SystemExit(f"bench_startup: {checkout}: no mpilaunch/ package there")
    subprocess.run([C.PY, "-m", "compileall", "-q", os.path.join(root, "mpilaunch")], check=True)
    return root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=21, help="measured rounds (one warm-up more)")
    ap.add_argument("checkouts", nargs="*", default=["."], help="checkouts whose mpilaunch to run")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-startup-")
    C.setup_bytecode_cache(work)     # every process started from here inherits it
    dirs = [_compiled(d) for d in args.checkouts]
    cmds = {name: L.commands(mpirun, 4, os.path.join(work, name))
            for name, mpirun in (("Open MPI 5", C.OMPI5), ("Open MPI 4.1", C.OMPI4))}
    variants = []
    for m in cmds:
        variants += [(m, "bare"), (m, "adapter")] + [(m, d) for d in dirs]

    def argv_env(m, v):
        c = cmds[m]
        env = dict(c["env"])
        if v == "bare":
            return c[L.V_BARE], env
        if v == "adapter":
            return c[L.V_ADAPTER], env
        return c[L.V_DEFAULT], {**env, "PYTHONPATH": v}

    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds + 1):
        shift = r % len(variants)
        for k in variants[shift:] + variants[:shift]:
            argv, env = argv_env(*k)
            t = C.timed_run(argv, env=env, cwd=work)
            if t.rc != 0:
                raise SystemExit(f"bench_startup: {k} exited {t.rc}")
            if r:
                wall[k].append(t.wall)
                cpu[k].append(t.cpu)
    load1 = os.getloadavg()[0]
    print(f"N=4, {args.rounds} rounds (+1 warm-up), load {load0:.1f} -> {load1:.1f}")
    for m in cmds:
        bw, bc = wall[(m, "bare")], cpu[(m, "bare")]
        print(f"{m} ({cmds[m]['version']}): bare mpirun {statistics.median(bw):.3f} s wall, "
              f"{statistics.median(bc):.3f} s CPU")
        for v in ["adapter"] + dirs:
            dw = statistics.median(a - b for a, b in zip(wall[(m, v)], bw))
            dc = statistics.median(a - b for a, b in zip(cpu[(m, v)], bc))
            name = "mpirun + adapters" if v == "adapter" else f"mpilaunch {v}"
            print(f"  {name:<40} +{dw:.3f} s wall  +{dc:.3f} s CPU over bare mpirun")
    return 0


if __name__ == "__main__":
    sys.exit(main())
