"""9. Scale: launch time against the number of hosts (1 rank per host), from worker-0 and from
a launcher outside the hostfile, bare mpirun (flat ssh and tree spawn) against mpilaunch; and
the fault timings at the largest size.

The hosts are a wide set of namespace hosts (tests/helpers/hosts, ``wide=True``: one /24 of
10.231.0.0/16, one bridge, one sshd per host), so every host's sshd, daemon and rank share this
machine's cores with the launcher: the per-host slope here is an upper bound of what the
launching node pays per host. Placements: ``worker-0`` (every command runs inside host 1, whose
address is the hostfile's first line, as ModelArts runs it) and ``outside`` (the root namespace,
not in the hostfile, as mpi-operator's launcher pod). Variants, interleaved round by round:

* ``bare mpirun (flat)``: the exact argv mpilaunch plans (its hostfile, ssh options ``-F cfg``,
  the ModelArts MCA defaults with ``plm_rsh_no_tree_spawn true``, keepalive, tune file) with the
  rank command ``python exit_at_once.py``;
* ``bare mpirun (tree)``: the same without ``plm_rsh_no_tree_spawn`` (Open MPI's default tree
  spawn: daemons start further daemons);
* ``mpilaunch``: ``python -m mpilaunch --hostfile H --ssh-args '-F cfg' -np K exit_at_once.py``;
* ``mpilaunch (tree)``: the same with ``--mca-args`` of the ModelArts defaults minus
  ``plm_rsh_no_tree_spawn``, against ``bare mpirun (tree)``: up to Open MPI's routing radix (64)
  tree spawn starts every daemon as flat ssh does; past it (128 hosts) daemons start daemons;
* ``mpilaunch (baseline)``: the same from the checkout in ``BENCH_BASELINE`` (before/after in
  one run), when given.

Each launch runs in a cgroup of its own (``NodeGroup``: the launcher, mpirun, its ssh clients,
on worker-0 also host 1's rank), whose CPU is the launching node's own, the figure that does not
depend on this rig; the hosts' sshd listeners are in another (``HOSTS_GROUP``), so the launch's
own CPU (both) is read without the other processes sharing this machine.

At the figure's size (32 hosts) also: each mpilaunch launch split by its event record
(``profile``), one rank's adapter CPU without mpirun (``adapter_cpu``), what the launching node
holds and spends per host (``launching_node``) and the fault scenarios of tests/helpers/scale.py
(``fault_timings``).

Standalone: ``python3 bench/bench_scale.py [--runs 5] [--hosts 1,2,4,8,16,32] [--faults]
[--profile RUNS] [--node 1,16,32] [--variants V1,V2] [--scenarios S1,S2] [--json FILE]`` (root;
``BENCH_BASELINE=/path/to/old/checkout`` adds the baseline variant at 32 hosts;
``BENCH_SCALE_PREFIX`` names the host set, ``mlk`` by default). In bench/run.py: ``BENCH_SCALE_HOSTS`` (the sizes),
``BENCH_SCALE_FAULT_RUNS`` (3), ``BENCH_BASELINE``.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import common as C  # noqa: E402

SCRIPT = os.path.join(C.EXAMPLES, "exit_at_once.py")
PREFIX = os.environ.get("BENCH_SCALE_PREFIX", "mlk")   # another for a second run at once
SIZES = (1, 2, 4, 8, 16, 32)
TARGET_RATIO = 1.05
LARGE, TARGET_LARGE, TARGET_NODE_CPU = 128, 1.10, 1.05   # past the radix: launch time; the launching node's CPU
PLACEMENTS = ("worker-0", "outside")
V_FLAT, V_TREE, V_ML, V_MLT, V_OLD = ("bare mpirun (flat)", "bare mpirun (tree)", "mpilaunch",
                                      "mpilaunch (tree)", "mpilaunch (baseline)")
# each mpilaunch variant against the bare mpirun that starts its daemons the same way
PAIRS = ((V_ML, V_FLAT, ""), (V_MLT, V_TREE, " tree"), (V_OLD, V_FLAT, " baseline"))
NO_TREE_MCA = "-mca pml ob1 -mca btl ^openib"   # the ModelArts default minus plm_rsh_no_tree_spawn


def _plan(mpirun, hostfile, k, cfg_path, work, mca=None):
    from mpilaunch import backends, rundir
    from mpilaunch.config import launchconfig, mpi, options

    run_dir = tempfile.mkdtemp(prefix="plan-", dir=work)
    argv = ["--mpirun", mpirun, "--hostfile", hostfile, "--ssh-args", f"-F {cfg_path}", "-np", str(k),
            "--master_port", str(C.QUIET_PORT), "--log_dir", os.path.join(work, "logs")]
    if mca is not None:
        argv += ["--mca-args", mca]
    env = C.base_env()
    cfg = launchconfig.build(options.parser().parse_args(argv + [SCRIPT]), env)
    backend = backends.for_mpi(mpi.detect(cfg.mpirun, env))
    plan = backend.plan(cfg, env, run_dir, os.geteuid())
    for path, text in backend.files(plan):
        rundir.write_atomic(path, text)
    return plan, {**env, **plan.extra_env}


def commands(desc, mpirun, k, placement, work, baseline=None):
    """{variant: (argv, env)} for k hosts in one placement (the baseline variant only when
    ``baseline`` is given: a checkout's directory)."""
    from mpilaunch.backends.openmpi import argv as plan_argv

    hostfile = os.path.join(work, f"hosts{k}")
    with open(hostfile, "w") as fh:
        fh.writelines(f"{h['addr']} slots=1\n" for h in desc["hosts"][:k])
    h1 = desc["hosts"][0]
    inside = (["nsenter", "-t", str(h1["sshd_pid"]), "-u", "--", "ip", "netns", "exec", h1["netns"]]
              if placement == "worker-0" else [])
    out = {}
    for name, mca in ((V_FLAT, None), (V_TREE, NO_TREE_MCA)):
        plan, env = _plan(mpirun, hostfile, k, desc["ssh_config"], work, mca)
        out[name] = (inside + plan_argv(C.replace_plan(plan, rank_command=(C.PY, SCRIPT))), env)
    env = C.base_env()
    front = [C.PY, "-m", "mpilaunch", "--mpirun", mpirun, "--hostfile", hostfile,
             "--ssh-args", f"-F {desc['ssh_config']}", "-np", str(k), "--master_port", str(C.QUIET_PORT),
             "--log_dir", os.path.join(work, "logs"), SCRIPT]
    out[V_ML] = (inside + front, env)
    out[V_MLT] = (inside + front[:-1] + ["--mca-args", NO_TREE_MCA, SCRIPT], env)
    if baseline:
        # -P: the working directory (this checkout) must not come before the baseline's package
        out[V_OLD] = (inside + [front[0], "-P"] + front[1:], {**env, "PYTHONPATH": baseline})
    return out


SETTLE = 0.4   # s after a launch before the machine's CPU is read: remote sshds and daemons exit


def machine_busy() -> float:
    """CPU seconds this machine has spent so far (every core, every process: /proc/stat)."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")   # minus idle and iowait


CPUACCT = "/sys/fs/cgroup/cpuacct"   # cgroup v1's CPU accounting (v2: the unified tree)
UNIFIED = "/sys/fs/cgroup/unified"


class NodeGroup:
    """A cgroup of its own for one launch: the launch's first process joins it before it execs
    (so everything it starts here, the launcher, mpirun, its ssh clients, a local rank, is in it
    from birth), and the remote hosts' sshd, daemons and ranks are not (their sshd, started by the
    host set, forks them outside it, though in this kernel). Its CPU is the launching node's own,
    the figure that does not depend on this rig. None where no cgroup can be made."""

    _n = 0

    def __init__(self):
        NodeGroup._n += 1
        name = f"bench-scale-{os.getpid()}-{NodeGroup._n}"
        self.path = None
        for root, usage in ((CPUACCT, "cpuacct.usage"), (UNIFIED, "cpu.stat")):
            if os.access(os.path.join(root, "cgroup.procs"), os.W_OK):
                try:
                    os.mkdir(os.path.join(root, name))
                except OSError:
                    continue
                self.path, self.usage = os.path.join(root, name), usage
                break

    def join(self):
        """preexec_fn: the child moves itself in, between fork and exec."""
        if self.path:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
                fh.write("0")   # 0: the writer itself

    def cpu(self):
        """CPU seconds of every process that ever ran in the group (exited ones included)."""
        if not self.path:
            return None
        with open(os.path.join(self.path, self.usage)) as fh:
            text = fh.read()
        if self.usage == "cpuacct.usage":
            return int(text) / 1e9
        return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6

    def adopt(self, pids):
        """Move running processes in (their later children are born in it)."""
        if self.path:
            for pid in pids:
                with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
                    fh.write(str(pid))

    def pids(self):
        if not self.path:
            return []
        with open(os.path.join(self.path, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]

    def remove(self):
        """Kill what is left in the group (this launch's own processes, by pid) and remove it."""
        if not self.path:
            return
        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            __import__("time").sleep(0.02)
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def timed_run(argv, env, stderr, group, timeout=180.0):
    """C.timed_run with the child in ``group`` from its first instruction (preexec_fn: this
    process has no threads)."""
    import subprocess
    import time

    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), env=env, cwd=C.REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                            preexec_fn=group.join)
    deadline = t0 + timeout
    timed_out = False
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            timed_out = True
            C.kill_group(proc.pid)
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return C.RunResult(wall, proc.returncode, ru.ru_utime + ru.ru_stime, timed_out)


# The namespace hosts' sshd listeners, moved into a group of their own once up: every sshd
# session, daemon and rank a launch starts there is born in it, so a launch's own CPU (launching
# node + hosts) is read without the other processes that share this machine.
HOSTS_GROUP = None


def _run(argv, env, work):
    """One launch: wall time; ``machine_cpu``: the CPU every process on this machine spent
    from its start to ``SETTLE`` s after its end (every namespace host lives on this machine,
    so that is the launch's whole cost: ssh, sshd, daemons, ranks, launcher; steadier than the
    wall time, whose runs spread by seconds under the section's own load); ``node_cpu``: the
    launching node's own share of it (NodeGroup); ``node_left``: its processes still alive
    ``SETTLE`` s after the launch's end (then killed); ``load``: the 1-minute load at its start."""
    err = os.path.join(work, "stderr.txt")
    group = NodeGroup()
    try:
        load = os.getloadavg()[0]
        h0 = HOSTS_GROUP.cpu() if HOSTS_GROUP else None
        c0 = machine_busy()
        with open(err, "wb") as fh:
            r = timed_run(argv, env, fh, group)
        __import__("time").sleep(SETTLE)
        r.extra["machine_cpu"] = machine_busy() - c0
        r.extra["node_cpu"] = group.cpu()
        r.extra["hosts_cpu"] = None if h0 is None else HOSTS_GROUP.cpu() - h0
        r.extra["node_left"] = len(group.pids())
        r.extra["load"] = round(load, 2)
    finally:
        group.remove()
    with open(err, errors="replace") as fh:
        text = fh.read()
    r.extra["stderr_lines"] = len(text.splitlines())
    r.extra["setpgid"] = text.count("setpgid")
    if not r.ok:
        # what mpirun and mpilaunch said, without Open MPI's setpgid warnings (one per host)
        said = [line for line in text.strip().splitlines() if "setpgid" not in line]
        r.extra["error"] = said[-12:]
    return r


def slope(points):
    """Least-squares seconds per host over (hosts, seconds) points."""
    pts = [(x, y) for x, y in points if y is not None]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def fault_size(sizes):
    """The size the figures are about: 32 hosts when measured (64 is the extra size)."""
    return 32 if 32 in sizes else max(sizes)


def measure(runs, log=print, sizes=SIZES, mpirun=C.OMPI5, faults=False, baseline=None, fault_runs=3,
            prof_runs=0, node_sizes=(), scenarios=None, only=None):
    from helpers.hosts import hostset

    why = hostset.missing_prereqs()
    if why:
        return {"skipped": why}
    n = max(sizes)
    global HOSTS_GROUP
    desc = hostset.up(n, PREFIX, None, os.getpid(), verify=True, quiet=True, wide=True)
    work = tempfile.mkdtemp(prefix="bench-scale-")
    HOSTS_GROUP = NodeGroup()
    try:
        HOSTS_GROUP.adopt(h["sshd_pid"] for h in desc["hosts"])
        # the baseline checkout is timed at the figure's size only (the old code's preflight
        # makes every one of its launches seconds longer: all sizes would double the section)
        base_at = fault_size(sizes)
        cases = [((p, k), commands(desc, mpirun, k, p, work, baseline if k == base_at else None))
                 for p in PLACEMENTS for k in sizes]
        if only:   # --variants: these only
            cases = [(key, {v: c for v, c in cmds.items() if v in only}) for key, cmds in cases]
        variants = list(dict.fromkeys(v for _, cmds in cases for v in cmds))
        res = {key: {v: [] for v in cmds} for key, cmds in cases}
        loads = [C.loadavg()]
        for rnd in range(runs + 1 if runs else 0):   # round 0: warm-up, discarded (--runs 0: none)
            for key, cmds in cases:
                names = list(cmds)
                names = names[rnd % len(names):] + names[:rnd % len(names)]   # no variant always first
                for v in names:
                    argv, env = cmds[v]
                    r = _run(argv, env, work)
                    if rnd:
                        res[key][v].append(r)
                    if not r.ok:
                        log(f"  [scale] {key} {v}: FAILED rc={r.rc}:\n    " + "\n    ".join(r.extra["error"]))
                    log(f"  [scale] round {rnd} {key[0]} {key[1]} hosts {v}: {r.wall:.2f} s, launching node "
                        f"{_f(r.extra.get('node_cpu'), 3)} s CPU, hosts {_f(r.extra.get('hosts_cpu'), 1)} s, "
                        f"machine {r.extra['machine_cpu']:.1f} s, "
                        f"load {r.extra['load']}")
            loads.append(C.loadavg())
            log(f"[scale] round {rnd}/{runs} done, load {loads[-1]}")
        out = {"runs": runs, "sizes": list(sizes), "mpirun": mpirun, "variants": variants,
               "version": C.mpi_version(mpirun), "loads": loads, "rows": [], "slopes": {},
               "commands": {f"{p}, {k} hosts": {v: argv for v, (argv, _) in cmds.items()}
                            for (p, k), cmds in cases if k == base_at}}
        for (p, k), by in res.items():
            row = {"placement": p, "hosts": k}
            for v in variants:
                rs = by.get(v, [])
                ok = [r.wall for r in rs if r.ok]
                row[v] = statistics.median(ok) if ok else None
                row[v + " failed"] = len(rs) - len(ok)
                row[v + " setpgid"] = max((r.extra.get("setpgid", 0) for r in rs), default=0)
                row[v + " walls"] = [round(r.wall, 3) if r.ok else None for r in rs]
                row[v + " errors"] = [r.extra["error"] for r in rs if not r.ok]
                cpu = [r.extra["machine_cpu"] for r in rs if r.ok]
                row[v + " machine cpu"] = statistics.median(cpu) if cpu else None
                row[v + " machine cpus"] = [round(r.extra["machine_cpu"], 2) for r in rs]
                node = [r.extra["node_cpu"] for r in rs if r.ok and r.extra.get("node_cpu") is not None]
                row[v + " node cpu"] = statistics.median(node) if node else None
                row[v + " node cpus"] = [None if r.extra.get("node_cpu") is None else round(r.extra["node_cpu"], 3)
                                         for r in rs]
                row[v + " node left"] = max((r.extra.get("node_left", 0) for r in rs), default=0)
                own = [r.extra["node_cpu"] + r.extra["hosts_cpu"] for r in rs
                       if r.ok and r.extra.get("node_cpu") is not None and r.extra.get("hosts_cpu") is not None]
                row[v + " launch cpu"] = statistics.median(own) if own else None
                row[v + " loads"] = [r.extra.get("load") for r in rs]
            for a_v, b_v, tag in PAIRS:
                if a_v not in by or b_v not in by:
                    continue
                both = [(a, b) for a, b in zip(by[a_v], by[b_v]) if a.ok and b.ok]
                for key, val in (("ratio", lambda r: r.wall), ("cpu ratio", lambda r: r.extra["machine_cpu"]),
                                 ("node cpu ratio", lambda r: r.extra.get("node_cpu")),
                                 ("launch cpu ratio", lambda r: None if r.extra.get("hosts_cpu") is None
                                  or r.extra.get("node_cpu") is None else r.extra["node_cpu"] + r.extra["hosts_cpu"])):
                    got = [val(a) / val(b) for a, b in both if val(a) is not None and val(b)]
                    row[key + tag] = statistics.median(got) if got else None
            out["rows"].append(row)
        for p in PLACEMENTS:
            rows = [r for r in out["rows"] if r["placement"] == p]
            out["slopes"][p] = {v: slope([(r["hosts"], r[v]) for r in rows]) for v in variants if v != V_OLD}
            out.setdefault("node slopes", {})[p] = {v: slope([(r["hosts"], r[v + " node cpu"]) for r in rows])
                                                    for v in variants if v != V_OLD}
        if prof_runs:
            out["profile"] = profile(desc, fault_size(sizes), mpirun, prof_runs, log, work)
            out["adapter_cpu_ms"] = adapter_cpu()
            log(f"[scale] adapter CPU (ms): {out['adapter_cpu_ms']}")
        if node_sizes:
            out["node"] = launching_node(desc, node_sizes, mpirun, log=log, work=work)
        if faults:
            out["faults"] = fault_timings(desc, mpirun, fault_size(sizes), work, log, fault_runs, scenarios)
            out["fault_hosts"] = fault_size(sizes)
        return out
    finally:
        hostset.down(PREFIX, force=True)
        HOSTS_GROUP.remove()
        HOSTS_GROUP = None
        __import__("shutil").rmtree(work, ignore_errors=True)


def fault_timings(desc, mpirun, n, work, log, runs=3, names=None):
    """The fault scenarios of tests/multihost/test_scale.py at n hosts (tests/helpers/scale.py;
    ``names``: only these)."""
    from helpers import scale
    from helpers.fixtures_hosts import TestHosts

    th = TestHosts(desc)
    out = {}
    for name, fn in scale.SCENARIOS.items():
        if names and name not in names:
            continue
        got = []
        for i in range(runs):
            r = fn(th, mpirun, n, os.path.join(work, f"{name}-{i}"))
            got.append(r)
            log(f"  [scale] fault {name} run {i + 1}: {r.get('seconds')} s, all gone {r.get('all_gone_s')} s, "
                f"rc={r.get('rc')} left={r.get('left')} load {C.loadavg()}")
        secs = [g["seconds"] for g in got if g.get("seconds") is not None]
        gone = [g["all_gone_s"] for g in got if g.get("all_gone_s") is not None]
        out[name] = {"median_s": statistics.median(secs) if secs else None, "max_s": max(secs) if secs else None,
                     "seconds": secs, "all_gone_max_s": max(gone) if gone else None,
                     "rcs": [g.get("rc") for g in got], "left": [g.get("left") for g in got],
                     "what": scale.WHAT[name],
                     "summary": [line for line in (got[-1].get("stderr") or "").splitlines()
                                 if line.startswith("mpilaunch")][:6]}
    return out


def phases(log_dir):
    """Where one mpilaunch launch's time went, from its event record (LOG_DIR/events.jsonl, the
    launcher's clock): -> {phase: seconds}."""
    recs = [json.loads(line) for line in open(os.path.join(log_dir, "events.jsonl"))]
    first = {}
    for r in recs:
        first.setdefault(r["kind"], r["t"])
    ups = sorted(r["t"] for r in recs if r["kind"] == "adapter_up")
    starts = {r["rank"]: r["t"] for r in recs if r["kind"] == "process_start" and r.get("role") == "worker"}
    upd = {r["rank"]: r["t"] for r in recs if r["kind"] == "adapter_up"}
    exits = sorted(r["t"] for r in recs if r["kind"] == "process_exit")
    gap = sorted(starts[k] - upd[k] for k in starts if k in upd)
    t0 = first["launcher_start"]
    out = {"launcher start -> mpirun started": first["starter_start"] - t0,
           "mpirun started -> first adapter up": ups[0] - first["starter_start"] if ups else None,
           "first -> last adapter up": ups[-1] - ups[0] if ups else None,
           "adapter up -> worker started (median)": statistics.median(gap) if gap else None,
           "adapter up -> worker started (max)": gap[-1] if gap else None,
           "last adapter up -> last rank exit": exits[-1] - ups[-1] if exits and ups else None,
           "last rank exit -> mpirun exit": first["starter_exit"] - exits[-1] if exits else None,
           "mpirun exit -> job end record": first["job_end"] - first["starter_exit"]}
    return {k: None if v is None else round(v, 3) for k, v in out.items()}


def profile(desc, n, mpirun=C.OMPI5, runs=3, log=print, work=None):
    """mpilaunch launches at n hosts per placement, each split by its event record, the bare
    mpirun (flat) launch beside each for the whole: {placement: [per run], "median": ...}."""
    work = work or tempfile.mkdtemp(prefix="bench-scale-prof-")
    out = {}
    for p in PLACEMENTS:
        cmds = commands(desc, mpirun, n, p, work)
        for i in range(runs):
            logs = os.path.join(work, "logs")
            __import__("shutil").rmtree(logs, ignore_errors=True)
            t = _run(*cmds[V_ML], work)
            ph = phases(logs) if t.ok else {}
            b = _run(*cmds[V_FLAT], work)
            out.setdefault(p, []).append({"mpilaunch": round(t.wall, 3), "bare flat": round(b.wall, 3), **ph})
            log(f"[scale profile] {p} {n} hosts run {i + 1}: mpilaunch {t.wall:.2f} s, bare {b.wall:.2f} s, {ph}")
    out["median"] = {p: {k: statistics.median(x[k] for x in out[p] if x.get(k) is not None)
                         for k in out[p][0] if any(x.get(k) is not None for x in out[p])}
                     for p in PLACEMENTS if out.get(p)}
    return out


def adapter_cpu(runs=15):
    """CPU of one rank's adapter (its interpreter, imports and work) without mpirun: the rank
    command of a 1-rank job run by hand with Open MPI's rank variables set, against the worker
    alone; medians of ``runs``. -> {"adapter + worker": ms, "worker": ms, "python -S -c pass": ms}."""
    import resource
    import subprocess

    from mpilaunch.config import launchconfig, options
    from mpilaunch.backends import rankcmd

    logs = tempfile.mkdtemp(prefix="bench-scale-cpu-")
    cfg = launchconfig.build(options.parser().parse_args(
        ["-np", "1", "--master_port", str(C.QUIET_PORT), "--no-scheduler", "--log_dir", logs, SCRIPT]), C.base_env())
    env = {**C.base_env(), "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "OMPI_COMM_WORLD_NODE_RANK": "0"}

    def cpu(argv):
        got = []
        for i in range(runs + 2):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if i >= 2:
                got.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        return round(statistics.median(got) * 1e3, 1)

    try:
        return {"adapter + worker": cpu(list(rankcmd.rank_command(cfg))), "worker": cpu([C.PY, SCRIPT]),
                "python -S -c pass": cpu([C.PY, "-S", "-c", "pass"])}
    finally:
        __import__("shutil").rmtree(logs, ignore_errors=True)


def launching_node(desc, sizes, mpirun=C.OMPI5, runs=3, log=print, work=None):
    """What the launching node itself pays per host, the launcher outside the hostfile (so every
    host is remote and nothing of a rank runs here):

    ``resident``: once every rank of a job that sleeps on every host is up, the processes, open
    files and memory (RSS) of the launching node's tree under mpilaunch, how many of them are ssh
    clients, and the CPU each part used so far (the start's: the sessions idle afterwards). (The
    CPU of a whole launch from os.wait4 undercounts: ssh clients that outlive mpirun are reaped
    by another process.)"""
    import signal as _signal

    import psutil
    from helpers import scale
    from helpers.fixtures_hosts import TestHosts

    work = work or tempfile.mkdtemp(prefix="bench-scale-node-")
    out = {"resident": {}}
    th = TestHosts(desc)
    for k in sizes:
        w = os.path.join(work, f"resident{k}")
        proc = scale.start(th, scale.argv(th, mpirun, k, w, "sleep", sleep=60.0), outside=True)
        try:
            if scale.wait_ranks_up(w, k):
                tree = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
                procs = files = rss = ssh = 0
                cpu = {"ssh": 0.0, "mpirun": 0.0, "launcher": 0.0}
                for p in tree:
                    try:
                        files += p.num_fds()
                        rss += p.memory_info().rss
                        procs += 1
                        name = p.name()
                        ssh += name == "ssh"
                        t = p.cpu_times()
                        part = ("ssh" if name == "ssh" else "launcher" if p.pid == proc.pid
                                else "mpirun" if name in ("mpirun", "prterun", "prte") else None)
                        if part:
                            cpu[part] += t.user + t.system
                    except psutil.Error:
                        pass
                out["resident"][k] = {"processes": procs, "ssh clients": ssh, "open files": files,
                                      "rss MiB": round(rss / 2**20, 1),
                                      "launcher open files": psutil.Process(proc.pid).num_fds(),
                                      **{f"cpu s, {n}": round(v, 3) for n, v in cpu.items()}}
                log(f"[scale] launching node at {k} hosts, ranks up: {out['resident'][k]}")
        finally:
            proc.send_signal(_signal.SIGTERM)
            scale.finish(th, proc)
            scale.left_on_hosts(th)
    return out


def _f(x, d=2):
    return "—" if x is None else f"{x:.{d}f}"


def _ratios(r, v, key):
    """The paired ratios of ``key`` a row has for the variants in ``v``: [(label, value)]."""
    return [(f"{a} / {b}", r.get(key + tag)) for a, b, tag in PAIRS if a in v and b in v]


def tables(res):
    v = res["variants"]
    pairs = [f"{a} / {b}" for a, b, _ in PAIRS if a in v and b in v]
    rows = []
    for r in res["rows"]:
        rows.append([r["placement"], r["hosts"], *[_f(r[x]) for x in v],
                     *[_f(x) + "x" for _, x in _ratios(r, v, "ratio")],
                     " / ".join(str(r[x + " failed"]) for x in v), r.get(V_ML + " setpgid", "—"),
                     _f(min(filter(None, sum((r.get(x + " loads", []) for x in v), [])), default=None), 1) + "-"
                     + _f(max(filter(None, sum((r.get(x + " loads", []) for x in v), [])), default=None), 1)])
    t = [{"title": f"launch time (s, median of {res['runs']} interleaved rounds), 1 rank per host, {res['version']}; "
                   "ratios: medians of each round's own pair",
          "columns": ["placement", "hosts", *v, *pairs, "failed runs", "setpgid lines (mpilaunch)",
                      "1-min load at the launches' starts"],
          "rows": rows},
         {"title": "the machine's CPU per launch (s, median; every process on this machine, ssh, sshd, "
                   "daemons, ranks and launcher, to 0.4 s after the end), and mpilaunch's against bare "
                   "mpirun's (median of the paired ratios)",
          "columns": ["placement", "hosts", *v, *pairs],
          "rows": [[r["placement"], r["hosts"], *[_f(r.get(x + " machine cpu")) for x in v],
                    *[_f(x, 3) + "x" for _, x in _ratios(r, v, "cpu ratio")]]
                   for r in res["rows"]]}]
    if any(r.get(x + " node cpu") is not None for r in res["rows"] for x in v):
        t.append({"title": "the launching node's own CPU per launch (s, median; a cgroup of the launch's own: the "
                           "launcher, mpirun/prterun, its ssh clients, on worker-0 also host 1's rank; not the "
                           "remote hosts' sshd, daemons, ranks), per host (ms), and mpilaunch's against bare "
                           "mpirun's (median of the paired ratios); left: its processes alive 0.4 s after the end",
                  "columns": ["placement", "hosts", *v, *[f"{x} per host (ms)" for x in v], *pairs, "left"],
                  "rows": [[r["placement"], r["hosts"], *[_f(r.get(x + " node cpu"), 3) for x in v],
                            *[_f(None if r.get(x + " node cpu") is None else r[x + " node cpu"] / r["hosts"] * 1e3, 1)
                              for x in v],
                            *[_f(x, 3) + "x" for _, x in _ratios(r, v, "node cpu ratio")],
                            " / ".join(str(r.get(x + " node left", 0)) for x in v)]
                           for r in res["rows"]]})
    if any(r.get(x + " launch cpu") is not None for r in res["rows"] for x in v):
        t.append({"title": "the launch's own CPU (s, median): the launching node's group and the namespace hosts' "
                           "(their sshd sessions, daemons, ranks), without the other processes sharing this "
                           "machine; mpilaunch's against bare mpirun's (median of the paired ratios)",
                  "columns": ["placement", "hosts", *v, *pairs],
                  "rows": [[r["placement"], r["hosts"], *[_f(r.get(x + " launch cpu")) for x in v],
                            *[_f(x, 3) + "x" for _, x in _ratios(r, v, "launch cpu ratio")]]
                           for r in res["rows"]]})
    if len(res["sizes"]) > 1:
        t.append({"title": "per-host slope (least squares over all sizes, ms per host): launch time; the launching "
                           "node's CPU",
                  "columns": ["placement", "figure", *[x for x in v if x != V_OLD]],
                  "rows": [[p, what, *[_f(s[x] * 1e3 if s.get(x) is not None else None, 1) for x in v if x != V_OLD]]
                           for what, key in (("launch time", "slopes"), ("launching node CPU", "node slopes"))
                           for p, s in res.get(key, {}).items()]})
    prof = (res.get("profile") or {}).get("median")
    if prof:
        keys = [k for k in next(iter(prof.values()))]
        t.append({"title": f"where one launch's time goes at {fault_size(res['sizes'])} hosts (medians of "
                           f"{len(res['profile'][PLACEMENTS[0]])} runs per placement, from mpilaunch's event record, "
                           "the launcher's clock; bare mpirun (flat) run right after each)",
                  "columns": ["phase (s)", *prof], "rows": [[k, *[_f(prof[p].get(k), 3) for p in prof]] for k in keys]})
    if res.get("adapter_cpu_ms"):
        a = res["adapter_cpu_ms"]
        t.append({"title": "CPU of one rank (ms, user+sys, median of 15, no mpirun: the rank command run by hand)",
                  "columns": ["adapter + worker", "worker alone", "adapter's share", "python -S -c pass"],
                  "rows": [[a["adapter + worker"], a["worker"], round(a["adapter + worker"] - a["worker"], 1),
                            a["python -S -c pass"]]]})
    node = res.get("node")
    if node:
        cols = ("processes", "ssh clients", "open files", "launcher open files", "rss MiB",
                "cpu s, ssh", "cpu s, mpirun", "cpu s, launcher")
        t.append({"title": "the launching node, launcher outside the hostfile, once every rank is up (mpilaunch's "
                           "tree: the launcher, mpirun, its ssh clients; CPU used so far)",
                  "columns": ["hosts", *cols],
                  "rows": [[k, *[r.get(c) for c in cols]]
                           for k, r in sorted(node["resident"].items(), key=lambda x: int(x[0]))]})
    if res.get("faults"):
        n = res.get("fault_hosts", max(res["sizes"]))
        t.append({"title": f"faults at {n} hosts, launcher on worker-0 unless said (median / max of the runs; "
                           "left: processes left on any host afterwards)",
                  "columns": ["scenario", "median s", "max s", "every process gone (max s)", "exit statuses", "left"],
                  "rows": [[f["what"], _f(f["median_s"]), _f(f["max_s"]), _f(f.get("all_gone_max_s")),
                            f["rcs"], "nothing" if not any(f["left"]) else f["left"]]
                           for f in res["faults"].values()]})
    return t


def sizes_from_env(default=SIZES):
    """``BENCH_SCALE_HOSTS=1,2,...,64``: the sizes for bench/run.py (default 1-32)."""
    raw = os.environ.get("BENCH_SCALE_HOSTS")
    return tuple(int(x) for x in raw.split(",")) if raw else default


def run(opts, log) -> dict:
    """Section for bench/run.py."""
    title = "9. Scale: launch time against hosts (namespace hosts, ssh)"
    if opts.smoke:
        res = {"skipped": "smoke run (32 namespace hosts take tens of seconds)"}
    else:
        res = measure(opts.runs or 5, log, sizes_from_env(), faults=True, baseline=os.environ.get("BENCH_BASELINE"),
                      fault_runs=int(os.environ.get("BENCH_SCALE_FAULT_RUNS", "3")), prof_runs=3,
                      node_sizes=tuple(k for k in (1, 16, 32, 64) if k in sizes_from_env()))
    if "skipped" in res:
        return {"key": "scale", "title": title, "method": [f"Skipped: {res['skipped']}."], "tables": [],
                "chart": None, "profile": [], "raw": res,
                "verdicts": [{"figure": "scale: mpilaunch / bare mpirun at 32 hosts",
                              "value": f"skipped ({res['skipped']})", "target": f"<= {TARGET_RATIO}x", "met": None}]}
    big = fault_size(res["sizes"])
    verdicts = [{"figure": f"scale, {r['placement']}, {big} hosts: mpilaunch / bare mpirun (flat)",
                 "value": _f(r["ratio"]) + "x", "target": f"<= {TARGET_RATIO}x",
                 "met": None if r["ratio"] is None else r["ratio"] <= TARGET_RATIO}
                for r in res["rows"] if r["hosts"] == big]
    for r in res["rows"]:   # past Open MPI's routing radix: both ways of starting daemons
        if r["hosts"] < LARGE:
            continue
        for key, tag, target, what in (("ratio", "", TARGET_LARGE, "launch time, flat ssh"),
                                       ("ratio", " tree", TARGET_LARGE, "launch time, tree spawn"),
                                       ("node cpu ratio", "", TARGET_NODE_CPU, "launching node's CPU, flat ssh"),
                                       ("node cpu ratio", " tree", TARGET_NODE_CPU, "launching node's CPU, tree spawn")):
            x = r.get(key + tag)
            verdicts.append({"figure": f"scale, {r['placement']}, {r['hosts']} hosts: {what}, mpilaunch / bare mpirun",
                             "value": _f(x, 3) + "x", "target": f"<= {target}x",
                             "met": None if x is None else x <= target})
    return {"key": "scale", "title": title, "method": [" ".join(" ".join(__doc__.split("\n\n")[1:3]).split())],
            "tables": tables(res), "verdicts": verdicts, "chart": None, "profile": [], "raw": res,
            "commands": res.get("commands", {})}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hosts", default=",".join(map(str, SIZES)))
    ap.add_argument("--faults", action="store_true")
    ap.add_argument("--fault-runs", type=int, default=3)
    ap.add_argument("--scenarios", default="", help="with --faults: only these (comma-separated) of "
                    "tests/helpers/scale.py's SCENARIOS, e.g. failing_worker,failing_worker_outside")
    ap.add_argument("--mpirun", default=C.OMPI5)
    ap.add_argument("--variants", default="", help="only these (comma-separated), e.g. "
                    f"'{V_TREE},{V_MLT}'")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--node", default="", metavar="SIZES",
                    help="also measure the launching node's CPU, processes and files at these sizes (1,32,64)")
    ap.add_argument("--profile", type=int, default=0, metavar="RUNS",
                    help="also split RUNS mpilaunch launches per placement at 32 hosts by their event record")
    a = ap.parse_args()
    # SIGTERM / SIGHUP end the run through measure()'s finally, which tears the hosts down
    for sig in (__import__("signal").SIGTERM, __import__("signal").SIGHUP):
        __import__("signal").signal(sig, lambda *_: sys.exit(143))
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    cache = tempfile.mkdtemp(prefix="bench-scale-pyc-")   # cached bytecode, as bench/run.py measures
    C.setup_bytecode_cache(cache)
    C.prewarm([C.PY])
    res = measure(a.runs, lambda m: print(m, file=sys.stderr, flush=True),
                  tuple(int(x) for x in a.hosts.split(",")), a.mpirun, a.faults, os.environ.get("BENCH_BASELINE"),
                  a.fault_runs, a.profile or 0, tuple(int(x) for x in a.node.split(",") if x),
                  [x for x in a.scenarios.split(",") if x] or None, [x for x in a.variants.split(",") if x] or None)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1, default=str)
    for t in tables(res) if "rows" in res else []:
        print(f"\n{t['title']}\n" + " | ".join(map(str, t["columns"])))
        for row in t["rows"]:
            print(" | ".join(map(str, row)))
