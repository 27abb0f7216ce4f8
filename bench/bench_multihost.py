"""8. Multi-host launch: mpilaunch over 2 and 3 hosts against bare mpirun
over the same hosts, Open MPI 5 and 4.1, on the namespace test hosts (tests/helpers/hosts: network
namespaces in 10.231.0.0/24, each with its own sshd; root needed, else the section is skipped).

Every command runs inside host 1 (``ip netns exec`` + its UTS namespace), the hostfile lists
hosts 1..K with 1 slot each, ``-np K``, ``examples/hello.py``. Variants, interleaved round by
round: ``bare mpirun`` (``mpirun -np K --hostfile H <ssh args -F cfg> --bind-to none python
hello.py``), ``mpilaunch`` (default: the ssh preflight, whose login leaves a control master
that mpirun's ssh reuses), ``mpilaunch --no-preflight``; all with ``--no-scheduler``.
Standalone: ``python3 bench/bench_multihost.py [--runs 9]``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
HELLO = os.path.join(REPO, "examples", "hello.py")
PREFIX = "mlb"
TARGET = 0.15
MPIS = [("Open MPI 5", os.path.join(os.path.dirname(sys.executable), "mpirun"), "--prtemca", "plm_ssh_args"),
        ("Open MPI 4.1", "/usr/bin/mpirun", "--mca", "plm_rsh_args")]
V_BARE, V_ML, V_NOPRE = "bare mpirun", "mpilaunch", "mpilaunch --no-preflight"


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENMPI_", "SSHD_PORT", "MA_", "VC_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("PYTHONPATH", None)
    return env


def _timed(argv, env, cwd):
    t = time.perf_counter()
    rc = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=120).returncode
    return time.perf_counter() - t, rc


def measure(runs: int, log=print, sizes=(2, 3)) -> dict:
    from helpers.hosts import hostset

    why = hostset.missing_prereqs()
    if why:
        return {"skipped": why}
    desc = hostset.up(max(sizes), PREFIX, None, os.getpid(), verify=True, quiet=True)
    work = tempfile.mkdtemp(prefix="bench-multihost-")
    try:
        h1 = desc["hosts"][0]
        inside = ["nsenter", "-t", str(h1["sshd_pid"]), "-u", "--", "ip", "netns", "exec", h1["netns"]]
        cfg = desc["ssh_config"]
        env = _env()
        variants = []
        for mname, mpirun, opt, param in MPIS:
            if not os.access(mpirun, os.X_OK):
                log(f"[multihost] {mname}: {mpirun} not installed, skipped")
                continue
            for k in sizes:
                hf = os.path.join(work, f"hosts{k}")
                with open(hf, "w") as fh:
                    fh.writelines(f"{h['addr']} slots=1\n" for h in desc["hosts"][:k])
                bare = inside + [mpirun, "-np", str(k), "--hostfile", hf, opt, param, f"-F {cfg}",
                                 "--bind-to", "none", "--allow-run-as-root", sys.executable, HELLO]
                ml = inside + [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "--hostfile", hf,
                               "--ssh-args", f"-F {cfg}", "-np", str(k), "--no-scheduler",
                               "--log_dir", os.path.join(work, "logs"), HELLO]
                variants.append(((mname, k), {V_BARE: bare, V_ML: ml, V_NOPRE: ml[:-1] + ["--no-preflight", HELLO]}))
        samples = {key: {v: [] for v in (V_BARE, V_ML, V_NOPRE)} for key, _ in variants}
        bad = {key: 0 for key, _ in variants}
        for round_no in range(runs + 1):   # round 0: warm-up, discarded
            for key, cmds in variants:
                walls = {}
                for v, argv in cmds.items():
                    wall, rc = _timed(argv, env, REPO)
                    walls[v] = wall if rc == 0 else None
                if round_no and all(w is not None for w in walls.values()):
                    for v, w in walls.items():
                        samples[key][v].append(w)
                elif round_no:
                    bad[key] += 1
            log(f"[multihost] round {round_no}/{runs} done")
        rows = []
        for (mname, k), s in samples.items():
            med = {v: statistics.median(x) if x else None for v, x in s.items()}
            added = [m - b for m, b in zip(s[V_ML], s[V_BARE])]
            added_nopre = [m - b for m, b in zip(s[V_NOPRE], s[V_BARE])]
            rows.append({"mpi": mname, "hosts": k, **{f"{v} (s)": med[v] for v in med},
                         "added_median_s": statistics.median(added) if added else None,
                         "added_no_preflight_s": statistics.median(added_nopre) if added_nopre else None,
                         "runs": len(added), "failed_rounds": bad[(mname, k)]})
        return {"runs": runs, "rows": rows, "ssh_config": cfg}
    finally:
        hostset.down(PREFIX, force=True)
        __import__("shutil").rmtree(work, ignore_errors=True)


def run(opts, log) -> dict:
    """Section for bench/run.py."""
    title = "8. Multi-host launch (namespace hosts, ssh)"
    res = ({"skipped": "smoke run (the namespace hosts take seconds to build)"} if opts.smoke
           else measure(opts.runs or 5, log))
    if "skipped" in res:
        return {"key": "multihost", "title": title, "method": [f"Skipped: {res['skipped']}."],
                "tables": [], "chart": None, "profile": [], "raw": res,
                "verdicts": [{"figure": "multi-host launch: mpilaunch - bare mpirun",
                              "value": f"skipped ({res['skipped']})", "target": f"<= +{TARGET} s",
                              "met": None}]}
    f = lambda x: "—" if x is None else f"{x:.3f}"   # noqa: E731
    sf = lambda x: "—" if x is None else f"{x:+.3f}"   # noqa: E731
    return {
        "key": "multihost", "title": title,
        "method": [" ".join(__doc__.split("\n\n")[1].split())],
        "tables": [{"title": f"hello.py, 1 rank per host, {res['runs']} interleaved rounds (wall s)",
                    "columns": ["MPI", "hosts", V_BARE, V_ML, V_NOPRE, "added (median of paired diffs)",
                                "added without preflight", "failed rounds"],
                    "rows": [[r["mpi"], r["hosts"], f(r[f"{V_BARE} (s)"]), f(r[f"{V_ML} (s)"]),
                              f(r[f"{V_NOPRE} (s)"]), sf(r["added_median_s"]), sf(r["added_no_preflight_s"]),
                              r["failed_rounds"]] for r in res["rows"]]}],
        "verdicts": [{"figure": f"multi-host launch, {r['mpi']}, {r['hosts']} hosts: mpilaunch - bare mpirun",
                      "value": sf(r["added_median_s"]), "target": f"<= +{TARGET} s",
                      "met": None if r["added_median_s"] is None else r["added_median_s"] <= TARGET}
                     for r in res["rows"]],
        "chart": None, "profile": [], "raw": res,
    }


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    print(json.dumps(measure(ap.parse_args().runs, lambda m: print(m, file=sys.stderr)), indent=1))
