"""What OpenSSH's key exchange costs a flat-ssh launch: bare mpirun (flat) and mpilaunch on K
namespace hosts, each with the default key exchange (OpenSSH 9.0-9.8: sntrup761x25519-sha512)
and with ``-o KexAlgorithms=curve25519-sha256`` in the ssh options; interleaved rounds in a
shuffled order after a warm-up round, the wall time and the machine's CPU per launch
(bench_scale._run). docs/SCALE.md quotes it.

Run (root, repository root): ``python3 bench/bench_ssh_kex.py [K=32] [ROUNDS=5]``; it brings up
its own wide set of test hosts (prefix ``mlq``) and removes it.
"""
import os
import random
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import bench_scale as B  # noqa: E402
import common as C  # noqa: E402

KEX = " -o KexAlgorithms=curve25519-sha256"


def variants(desc, k, work):
    from mpilaunch import backends, rundir
    from mpilaunch.config import launchconfig, mpi, options
    from mpilaunch.backends.openmpi import argv as plan_argv

    hostfile = os.path.join(work, "hosts")
    with open(hostfile, "w") as fh:
        fh.writelines(f"{h['addr']} slots=1\n" for h in desc["hosts"][:k])
    out = {}
    for name, extra in (("default kex", ""), ("curve25519", KEX)):
        argv = ["--mpirun", C.OMPI5, "--hostfile", hostfile, "--ssh-args", f"-F {desc['ssh_config']}{extra}",
                "-np", str(k), "--master_port", str(C.QUIET_PORT), "--log_dir", os.path.join(work, "logs")]
        env = C.base_env()
        cfg = launchconfig.build(options.parser().parse_args(argv + [B.SCRIPT]), env)
        backend = backends.for_mpi(mpi.detect(cfg.mpirun, env))
        plan = backend.plan(cfg, env, tempfile.mkdtemp(prefix="plan-", dir=work), os.geteuid())
        for path, text in backend.files(plan):
            rundir.write_atomic(path, text)
        out[f"bare, {name}"] = (plan_argv(C.replace_plan(plan, rank_command=(C.PY, B.SCRIPT))),
                                {**env, **plan.extra_env})
        out[f"mpilaunch, {name}"] = ([C.PY, "-m", "mpilaunch", *argv, B.SCRIPT], env)
    return out


def main(k=32, runs=5):
    from helpers.hosts import hostset

    desc = hostset.up(k, "mlq", None, os.getpid(), verify=True, quiet=True, wide=True)
    work = tempfile.mkdtemp(prefix="bench-kex-")
    res = {}
    try:
        cmds = variants(desc, k, work)
        for rnd in range(runs + 1):   # round 0: warm-up, discarded
            for v in random.sample(list(cmds), len(cmds)):
                r = B._run(*cmds[v], work)
                if not r.ok:
                    print(f"FAILED {v}: {r.extra.get('error')}")
                elif rnd:
                    res.setdefault(v, []).append((r.wall, r.extra["machine_cpu"]))
            print(f"round {rnd}/{runs} done, load {C.loadavg()}", flush=True)
    finally:
        hostset.down("mlq", force=True)
    for v, x in res.items():
        print(f"{v:28s} wall {statistics.median(a for a, _ in x):.2f} s, machine CPU "
              f"{statistics.median(b for _, b in x):.2f} s (walls {sorted(round(a, 2) for a, _ in x)})")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
