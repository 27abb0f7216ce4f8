"""The remote probe: what runs on every host after the ssh login, and what its answer means.

:data:`PROBE_CODE` runs with the rank interpreter (one ``python -c`` over ssh, or a local
subprocess for this machine) and prints one line, :data:`contract.PROBE_PREFIX` + JSON.
:func:`evaluate_probe` turns that JSON into results for python, mpilaunch, mpi4py, mpirun,
script, sched-port and the sysctls. Everything here but :data:`PROBE_CODE` is pure.
"""
from __future__ import annotations

import json
from typing import List, Mapping, Optional

import mpilaunch
from mpilaunch import contract
from mpilaunch.check.results import FAIL, OK, SKIP, WARN, CheckResult, Params
from mpilaunch.config.mpi import NAMES, parse_version_output
from mpilaunch.errors import UsageError

LARGE_JOB_RANKS = 64
MIN_BACKLOG = 4096
SYSCTLS = (("somaxconn", "net.core.somaxconn"), ("syn-backlog", "net.ipv4.tcp_max_syn_backlog"))

# Runs on every host with the rank interpreter: argv[1] is a JSON dict of what to look at.
# Prints one line: PROBE_PREFIX + JSON. Standard library only until the two imports tested.
PROBE_CODE = r'''
import json, os, socket, subprocess, sys
p = json.loads(sys.argv[1]); r = {"hostname": socket.gethostname(), "exe": sys.executable}
def err(e):
    return "%s: %s" % (type(e).__name__, e)
try:
    import mpilaunch; r["mpilaunch"] = getattr(mpilaunch, "__version__", "?")
except BaseException as e:
    r["mpilaunch_err"] = err(e)
try:
    import mpi4py; r["mpi4py"] = getattr(mpi4py, "__version__", "?")
except BaseException as e:
    r["mpi4py_err"] = err(e)
if p.get("mpirun"):
    try:
        o = subprocess.run([p["mpirun"], "--version"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=p["t"])
        r["mpirun_rc"] = o.returncode; r["mpirun_out"] = o.stdout.decode("utf-8", "replace")[:4000]
    except BaseException as e:
        r["mpirun_err"] = err(e)
if p.get("port"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", p["port"])); r["port_free"] = True
    except OSError as e:
        r["port_free"] = False; r["port_err"] = e.strerror or str(e)
    finally:
        s.close()
r["sysctl"] = {}
for name in p.get("sysctl", []):
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            r["sysctl"][name] = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
if p.get("script"):
    r["script"] = os.path.isfile(p["script"])
if p.get("deep"):   # check --deep: its agent (check/agent.py) forks from here, port bound first
    d = p["deep"]
    try:   # dual-stack: the checker may reach an IPv6-only host over IPv6
        ls = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0); where = "::"
    except OSError:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM); where = "0.0.0.0"
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((where, 0)); ls.listen(128); r["deep_port"] = ls.getsockname()[1]
    sys.stdout.flush()
    if os.fork() == 0:
        try:
            os.setsid(); nul = os.open(os.devnull, os.O_RDWR)
            for k in (0, 1, 2):
                os.dup2(nul, k)
            g = {"__name__": "mpilaunch_deep_agent"}; exec(d["code"], g); g["serve"](d, ls)
        finally:
            os._exit(0)
    ls.close()
''' + f'sys.stdout.write({contract.PROBE_PREFIX!r} + json.dumps(r) + "\\n")\n'


def probe_argv(p: Params, rank0_host: bool, timeout: float) -> List[str]:
    """The probe's argv on one host (rank 0's host also checks the scheduler port)."""
    ask = {"t": max(1.0, timeout), "sysctl": [name for _, name in SYSCTLS]}
    if p.mpirun:
        ask["mpirun"] = p.mpirun
    if rank0_host and p.master_port:
        ask["port"] = p.master_port
    if p.script:
        ask["script"] = p.script
    deep = getattr(p, "deep", None)   # check --deep's Params (check/deep.py): start its agent
    if deep:
        ask["deep"] = deep
    return [p.python, "-c", PROBE_CODE, json.dumps(ask, sort_keys=True)]


def parse_probe_output(stdout: str) -> Optional[dict]:
    for line in (stdout or "").splitlines():
        if line.startswith(contract.PROBE_PREFIX):
            try:
                return json.loads(line[len(contract.PROBE_PREFIX):])
            except ValueError:
                return None
    return None


def backlog_needed(ranks: int) -> Optional[int]:
    """Listen backlog a job of ``ranks`` ranks wants on its hosts (None: small job, no check)."""
    if ranks < LARGE_JOB_RANKS:
        return None
    return max(MIN_BACKLOG, ranks)


def evaluate_sysctl(host: str, addr: str, values: Mapping[str, int], ranks: int) -> List[CheckResult]:
    need = backlog_needed(ranks)
    out = []
    for check, name in SYSCTLS:
        value = values.get(name)
        if need is None or value is None:
            out.append(CheckResult(host, addr, check, SKIP if value is None else OK,
                                   f"{name}={value}" if value is not None else ""))
        elif value < need:
            out.append(CheckResult(
                host, addr, check, WARN,
                f"{name}={value} is below {need} for a {ranks}-rank job: connections to the "
                f"scheduler/master may be dropped at start-up — raise it there: sysctl -w {name}=65535 "
                "(inside the container when training in one)"))
        else:
            out.append(CheckResult(host, addr, check, OK, f"{name}={value}"))
    return out


def _mpirun(host: str, addr: str, probe: Mapping, p: Params, mpirun: str) -> CheckResult:
    """The probe's run of ``mpirun`` (p.mpirun, when the check has one) on ``host``."""
    want = ".".join(map(str, p.mpi_version or ()))
    if "mpirun_err" in probe or probe.get("mpirun_rc") not in (0, None):
        why = probe.get("mpirun_err") or f"exit {probe.get('mpirun_rc')}"
        return CheckResult(host, addr, "mpirun", FAIL,
                           f"{mpirun} does not run there ({why}) — install the same MPI "
                           f"({want}) at the same path on every host")
    try:
        got, dialect = parse_version_output(probe.get("mpirun_out", ""), mpirun)
        got_s = f"{NAMES.get(dialect, dialect)} " + ".".join(map(str, got))
    except UsageError:
        got, got_s = None, "an unrecognised MPI"
    if p.mpi_version is not None and got != tuple(p.mpi_version):
        return CheckResult(host, addr, "mpirun", FAIL,
                           f"{mpirun} is {got_s} there, {want} here — install the same "
                           "MPI at the same path on every host")
    return CheckResult(host, addr, "mpirun", OK, got_s)


def evaluate_probe(host: str, addr: str, probe: Mapping, p: Params, rank0_host: bool) -> List[CheckResult]:
    """The probe's JSON -> results for python, mpilaunch, mpi4py, mpirun, script, sched-port, sysctls."""
    res: List[CheckResult] = [CheckResult(host, addr, "python", OK, str(probe.get("exe", p.python)))]
    here = mpilaunch.__version__
    if "mpilaunch_err" in probe:
        res.append(CheckResult(host, addr, "mpilaunch", FAIL,
                               f"cannot import mpilaunch with {p.python} there ({probe['mpilaunch_err']}) — "
                               f"install mpilaunch {here} for that interpreter on every host"))
    elif probe.get("mpilaunch") != here:
        res.append(CheckResult(host, addr, "mpilaunch", FAIL,
                               f"mpilaunch {probe.get('mpilaunch')} there, {here} here — install the same "
                               "mpilaunch version on every host"))
    else:
        res.append(CheckResult(host, addr, "mpilaunch", OK, here))
    if "mpi4py_err" in probe:
        res.append(CheckResult(host, addr, "mpi4py", FAIL,
                               f"cannot import mpi4py with {p.python} there ({probe['mpi4py_err']}) — "
                               f"{p.python} -m pip install mpi4py there"))
    else:
        res.append(CheckResult(host, addr, "mpi4py", OK, str(probe.get("mpi4py", ""))))
    res.append(_mpirun(host, addr, probe, p, p.mpirun) if p.mpirun else CheckResult(host, addr, "mpirun", SKIP))
    if not p.script:
        res.append(CheckResult(host, addr, "script", SKIP))
    elif probe.get("script"):
        res.append(CheckResult(host, addr, "script", OK, p.script))
    else:
        res.append(CheckResult(host, addr, "script", FAIL,
                               f"{p.script} not found there — put the script at the same path on every "
                               "host (shared file system or the same image)"))
    if not (rank0_host and p.master_port):
        res.append(CheckResult(host, addr, "sched-port", SKIP))
    elif probe.get("port_free"):
        res.append(CheckResult(host, addr, "sched-port", OK, f"port {p.master_port} free"))
    else:
        res.append(CheckResult(host, addr, "sched-port", FAIL,
                               f"scheduler/master port {p.master_port} is not free on rank 0's host "
                               f"({probe.get('port_err', 'in use')}) — stop what holds it, or pass "
                               "another --master_port (0 = any free port)"))
    res += evaluate_sysctl(host, addr, probe.get("sysctl") or {}, p.np)
    if probe.get("deep_port"):   # not a column: where check/deep.py reaches the host's agent
        res.append(CheckResult(host, addr, "agent", OK, f"port {probe['deep_port']}"))
    return res
