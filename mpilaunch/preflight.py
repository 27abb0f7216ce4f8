"""Preflight of a multi-node launch: ``mpilaunch check [launcher options] [SCRIPT ...]``.

Takes the launcher's own options (``mpilaunch.options``) and builds the same
``LaunchConfig`` (``mpilaunch.config.build``), so the hosts, np, ssh port and ssh options
checked are exactly those a launch would use. Per host, in parallel (a bounded pool of
daemon threads), each check with its own time-out:

==============  ==========================================================================
check           what
==============  ==========================================================================
resolve         the ssh destination (``ssh -G``: HostName from ``-F`` configs) resolves
ssh-port        its ssh port (``ssh -G``: ``--ssh-port``/``SSHD_PORT``/config) accepts TCP
ssh             ``ssh -o BatchMode=yes -o ConnectTimeout=N host ...`` logs in, no prompt
python          the rank interpreter (``--python``, else this one) exists at that path
mpilaunch       ``import mpilaunch`` works there and reports this host's version
mpi4py          ``import mpi4py`` works there
mpirun          the same mpirun path exists there and reports the same Open MPI version
script          the script (when given) exists at the same absolute path
sched-port      the scheduler/master port is free on rank 0's host (the first host)
somaxconn,      ``net.core.somaxconn`` / ``net.ipv4.tcp_max_syn_backlog`` (warning only) for
syn-backlog     large jobs (>= 64 ranks): below max(4096, ranks) connections may be dropped
slots           the hosts' slots cover np (job-wide)
==============  ==========================================================================

A local host (``localhost``, ``127.x``, this machine's name or one of its addresses) is not
reached over ssh; its probe runs as a local subprocess. Everything after the ssh login runs
in **one** ssh session per host: a Python one-liner (one argv element, quoted with
``shlex.quote`` for the remote shell) that prints one JSON line.

``run_checks`` is the library entry: the launcher can call it before a multi-node launch
with ``level="ssh"`` (resolve, ssh port, ssh login only). Exit status of ``mpilaunch check``:
0 when nothing failed (warnings allowed), 1 when a check failed, 2 for usage errors.
"""
from __future__ import annotations

import errno
import json
import math
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import mpilaunch
from mpilaunch import hostfile as hf
from mpilaunch.errors import UsageError

DEFAULT_TIMEOUT = 10.0
DEFAULT_PARALLEL = 64
TABLE_MAX_HOSTS = 40          # beyond this, print failures and the summary only (or --table)
MAX_LINES_PER_CHECK = 20      # failure lines per check kind before "... and N more"
LARGE_JOB_RANKS = 64
MIN_BACKLOG = 4096
SYSCTLS = (("somaxconn", "net.core.somaxconn"), ("syn-backlog", "net.ipv4.tcp_max_syn_backlog"))

OK, FAIL, WARN, SKIP = "ok", "fail", "warn", "skip"
LEVEL_SSH, LEVEL_FULL = "ssh", "full"

# Column order of the table (and of checks per host).
CHECKS = ("resolve", "ssh-port", "ssh", "python", "mpilaunch", "mpi4py", "mpirun", "script",
          "sched-port", "somaxconn", "syn-backlog")

PROBE_MARK = "@@mpilaunch-probe "

# Runs on every host with the rank interpreter: argv[1] is a JSON dict of what to look at.
# Prints one line: PROBE_MARK + JSON. Standard library only until the two imports tested.
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
sys.stdout.write("@@mpilaunch-probe " + json.dumps(r) + "\n")
'''


# --------------------------------------------------------------------------- results

@dataclass(frozen=True)
class CheckResult:
    """One check on one host (``host == ""`` for job-wide checks such as ``slots``)."""
    host: str
    addr: str
    check: str
    status: str          # ok | fail | warn | skip
    message: str = ""    # for fail/warn: what is wrong -- and the fix
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    @property
    def label(self) -> str:
        if not self.host:
            return "job"
        if self.addr and self.addr != self.host:
            return f"{self.host} ({self.addr})"
        return self.host

    def line(self) -> str:
        return f"{self.label}: {self.message}"


@dataclass(frozen=True)
class Params:
    """What to check. ``params_from_config`` derives it from a ``LaunchConfig``."""
    hosts: Tuple[hf.Host, ...]
    np: int
    ssh_port: Optional[int] = None
    ssh_extra: Tuple[str, ...] = ()
    python: str = sys.executable
    level: str = LEVEL_FULL
    mpirun: Optional[str] = None                    # absolute path (full level)
    mpi_version: Optional[Tuple[int, ...]] = None   # this host's, to compare with
    master_port: int = 0                            # 0 = not checked
    script: Optional[str] = None                    # absolute path checked on every host
    oversubscribe: bool = False
    hosts_source: str = "the hostfile"
    np_source: str = "np"
    port_source: str = "SSHD_PORT/--ssh-port"


def params_from_config(cfg, level: str = LEVEL_SSH, mpi_info=None, oversubscribe: Optional[bool] = None,
                       check_script: bool = False) -> Params:
    """A ``mpilaunch.config.LaunchConfig`` (+ ``mpilaunch.mpi.MpiInfo`` for the full level)."""
    script = None
    if check_script and cfg.script:
        if not cfg.no_python:
            script = os.path.abspath(cfg.script)
        elif os.path.isabs(cfg.script):
            script = cfg.script
    return Params(
        hosts=tuple(cfg.hosts), np=cfg.np, ssh_port=cfg.ssh_port, ssh_extra=tuple(cfg.ssh_extra),
        python=cfg.python, level=level,
        mpirun=mpi_info.path if mpi_info is not None else None,
        mpi_version=tuple(mpi_info.version) if mpi_info is not None else None,
        master_port=cfg.master_port,
        script=script,
        oversubscribe=cfg.oversubscribe if oversubscribe is None else oversubscribe,
        hosts_source=cfg.hosts_source, np_source=cfg.np_source,
    )


# --------------------------------------------------------------------------- ssh plumbing

@dataclass(frozen=True)
class SshTarget:
    """Where ssh really goes for a listed host (``ssh -G`` applies -F configs, -p, ...)."""
    name: str
    hostname: str
    port: int
    error: Optional[str] = None      # ssh -G failed: why (the ssh check fails with it)


def ssh_base(port: Optional[int], extra: Sequence[str]) -> List[str]:
    cmd = ["ssh"]
    if port is not None:
        cmd += ["-p", str(port)]
    return cmd + list(extra)


def parse_ssh_G(text: str) -> Dict[str, str]:
    """``ssh -G`` output -> {option: first value} (options lower-case, as ssh prints them)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and key not in out:
            out[key] = value.strip()
    return out


def ssh_target(name: str, port: Optional[int], extra: Sequence[str], timeout: float = 5.0) -> SshTarget:
    default_port = port if port is not None else 22
    try:
        proc = subprocess.run(ssh_base(port, extra) + ["-G", name], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace", timeout=timeout)
    except FileNotFoundError:
        return SshTarget(name, name, default_port, "ssh not found on PATH — install openssh-client")
    except subprocess.TimeoutExpired:
        return SshTarget(name, name, default_port, f"'ssh -G {name}' did not answer within {timeout:g}s")
    if proc.returncode != 0:
        why = _last_line(proc.stderr) or f"exit {proc.returncode}"
        return SshTarget(name, name, default_port, f"ssh rejects its options ({why}) — fix --ssh-args/--ssh-port")
    opts = parse_ssh_G(proc.stdout)
    try:
        real_port = int(opts.get("port", default_port))
    except ValueError:
        real_port = default_port
    return SshTarget(name, opts.get("hostname") or name, real_port)


def ssh_argv(name: str, port: Optional[int], extra: Sequence[str], timeout: float, remote: str) -> List[str]:
    """Non-interactive ssh running ``remote`` (one argv element, parsed by the remote shell)."""
    return ssh_base(port, extra) + [
        "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(math.ceil(timeout)))}",
        "-T", name, remote]


def remote_command(argv: Sequence[str]) -> str:
    """argv -> the single string ssh hands to the remote shell (each word quoted)."""
    return " ".join(shlex.quote(a) for a in argv)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def classify_ssh_error(stderr: str, port: int, timeout: float, port_source: str = "SSHD_PORT/--ssh-port") -> str:
    """ssh exit 255 -> one line: what went wrong and the fix."""
    text = stderr or ""
    low = text.lower()
    detail = _last_line(text)
    if "permission denied" in low:
        return (f"ssh login refused ({detail}) — put this user's public key in ~/.ssh/authorized_keys "
                "there (BatchMode: no password prompts; key via --ssh-args '-i KEY' or '-F CONFIG')")
    if "host key verification failed" in low or "remote host identification has changed" in low:
        return ("ssh host key unknown or changed — add it to ~/.ssh/known_hosts (ssh there once by hand) "
                "or set StrictHostKeyChecking in the ssh config passed with --ssh-args '-F CONFIG'")
    if "connection refused" in low:
        return f"ssh port {port} closed — is sshd running there? ({port_source})"
    if "timed out" in low:
        return f"no answer on ssh port {port} within {timeout:g}s — host down, unreachable or firewalled"
    if "could not resolve hostname" in low or "name or service not known" in low:
        return f"does not resolve ({detail}) — fix the host name or DNS / /etc/hosts"
    if "no route to host" in low or "network is unreachable" in low:
        return f"unreachable ({detail}) — check the network route to it"
    if "connection closed" in low or "connection reset" in low or "kex_exchange" in low:
        return f"sshd closed the connection ({detail}) — sshd overloaded (MaxStartups) or refusing this client"
    return f"ssh failed (exit 255): {detail or 'no message'}"


# --------------------------------------------------------------------------- resolve / connect

def resolve(name: str, timeout: float) -> Tuple[Optional[List[str]], Optional[str]]:
    """getaddrinfo with a time-out (the lookup runs in a daemon thread). -> (addrs, error)."""
    box: Dict[str, object] = {}

    def lookup():
        try:
            infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
            v4 = [i[4][0] for i in infos if i[0] == socket.AF_INET]
            v6 = [i[4][0] for i in infos if i[0] == socket.AF_INET6]
            box["addrs"] = list(dict.fromkeys(v4 + v6))
        except (socket.gaierror, UnicodeError, OSError) as exc:
            box["error"] = str(exc.args[1] if isinstance(exc, socket.gaierror) and len(exc.args) > 1 else exc)

    t = threading.Thread(target=lookup, name=f"resolve-{name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return None, f"name lookup took more than {timeout:g}s — check DNS (/etc/resolv.conf)"
    if "error" in box:
        return None, str(box["error"])
    addrs = box.get("addrs") or []
    if not addrs:
        return None, "no address"
    return list(addrs), None


def tcp_probe(addr: str, port: int, timeout: float) -> Optional[int]:
    """None if addr:port accepts a TCP connection, else the errno (ETIMEDOUT on time-out)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((addr, port))
        return None
    except socket.timeout:
        return errno.ETIMEDOUT
    except OSError as exc:
        return exc.errno or errno.EIO
    finally:
        s.close()


def port_message(err: int, port: int, timeout: float, port_source: str) -> str:
    if err == errno.ECONNREFUSED:
        return f"ssh port {port} closed — is sshd running there? ({port_source})"
    if err == errno.ETIMEDOUT:
        return f"no answer on ssh port {port} within {timeout:g}s — host down, unreachable or firewalled"
    if err in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"unreachable ({os.strerror(err)}) — host down or no network route to it"
    return f"cannot connect to ssh port {port} ({os.strerror(err)})"


_LOCAL_CACHE: Dict[str, object] = {}


def local_addresses() -> frozenset:
    """This machine's addresses (all interfaces) and names; cached."""
    if "addrs" not in _LOCAL_CACHE:
        addrs = set()
        try:
            import psutil

            for entries in psutil.net_if_addrs().values():
                for a in entries:
                    if a.family in (socket.AF_INET, socket.AF_INET6):
                        addrs.add(a.address.split("%", 1)[0])
        except Exception:  # pragma: no cover - psutil is a dependency
            pass
        _LOCAL_CACHE["addrs"] = frozenset(addrs)
    return _LOCAL_CACHE["addrs"]  # type: ignore[return-value]


def is_local(name: str, addrs: Iterable[str]) -> bool:
    """``localhost``, 127.x/::1, this machine's host name, or one of its interface addresses."""
    if name in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        own = {socket.gethostname(), socket.gethostname().split(".")[0]}
    except OSError:  # pragma: no cover
        own = set()
    if name in own:
        return True
    local = local_addresses()
    for a in addrs:
        if a.startswith("127.") or a == "::1" or a in local:
            return True
    return False


# --------------------------------------------------------------------------- pure evaluation

def check_slots(p: Params) -> CheckResult:
    slots = hf.total_slots(p.hosts)
    if p.np <= slots or p.oversubscribe:
        note = f"np {p.np} on {slots} slot(s)" + (" (oversubscribed)" if p.np > slots else "")
        return CheckResult("", "", "slots", OK, note)
    per_host = ", ".join(f"{h.name}: {h.slots}" for h in p.hosts[:8])
    if len(p.hosts) > 8:
        per_host += f", ... ({len(p.hosts)} hosts)"
    return CheckResult(
        "", "", "slots", FAIL,
        f"np {p.np} (from {p.np_source}) is more than the {slots} slot(s) of {p.hosts_source} "
        f"({per_host}) — lower np, add slots= to the hostfile (MA_NUM_GPUS / --local_worker_num), "
        "or pass --oversubscribe")


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


def evaluate_probe(host: str, addr: str, probe: Mapping, p: Params, rank0_host: bool) -> List[CheckResult]:
    """The probe's JSON -> results for python, mpilaunch, mpi4py, mpirun, script, sched-port, sysctls."""
    from mpilaunch.mpi import parse_version_output

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
    if p.mpirun:
        want = ".".join(map(str, p.mpi_version or ()))
        if "mpirun_err" in probe or probe.get("mpirun_rc") not in (0, None):
            why = probe.get("mpirun_err") or f"exit {probe.get('mpirun_rc')}"
            res.append(CheckResult(host, addr, "mpirun", FAIL,
                                   f"{p.mpirun} does not run there ({why}) — install the same Open MPI "
                                   f"({want}) at the same path on every host"))
        else:
            try:
                got, _ = parse_version_output(probe.get("mpirun_out", ""), p.mpirun)
                got_s = ".".join(map(str, got))
            except UsageError:
                got, got_s = None, "an unrecognised MPI"
            if p.mpi_version is not None and got != tuple(p.mpi_version):
                res.append(CheckResult(host, addr, "mpirun", FAIL,
                                       f"{p.mpirun} is Open MPI {got_s} there, {want} here — install the same "
                                       "Open MPI at the same path on every host"))
            else:
                res.append(CheckResult(host, addr, "mpirun", OK, f"Open MPI {got_s}"))
    else:
        res.append(CheckResult(host, addr, "mpirun", SKIP))
    if p.script:
        if probe.get("script"):
            res.append(CheckResult(host, addr, "script", OK, p.script))
        else:
            res.append(CheckResult(host, addr, "script", FAIL,
                                   f"{p.script} not found there — put the script at the same path on every "
                                   "host (shared file system or the same image)"))
    else:
        res.append(CheckResult(host, addr, "script", SKIP))
    if rank0_host and p.master_port:
        if probe.get("port_free"):
            res.append(CheckResult(host, addr, "sched-port", OK, f"port {p.master_port} free"))
        else:
            res.append(CheckResult(host, addr, "sched-port", FAIL,
                                   f"scheduler/master port {p.master_port} is not free on rank 0's host "
                                   f"({probe.get('port_err', 'in use')}) — stop what holds it, or pass "
                                   "another --master_port (0 = any free port)"))
    else:
        res.append(CheckResult(host, addr, "sched-port", SKIP))
    res += evaluate_sysctl(host, addr, probe.get("sysctl") or {}, p.np)
    return res


def parse_probe_output(stdout: str) -> Optional[dict]:
    for line in (stdout or "").splitlines():
        if line.startswith(PROBE_MARK):
            try:
                return json.loads(line[len(PROBE_MARK):])
            except ValueError:
                return None
    return None


def probe_argv(p: Params, rank0_host: bool, timeout: float) -> List[str]:
    ask = {"t": max(1.0, timeout), "sysctl": [name for _, name in SYSCTLS]}
    if p.mpirun:
        ask["mpirun"] = p.mpirun
    if rank0_host and p.master_port:
        ask["port"] = p.master_port
    if p.script:
        ask["script"] = p.script
    return [p.python, "-c", PROBE_CODE, json.dumps(ask, sort_keys=True)]


# --------------------------------------------------------------------------- one host

def _skip_rest(host: str, addr: str, after: str, level: str) -> List[CheckResult]:
    names = CHECKS if level == LEVEL_FULL else CHECKS[:3]
    return [CheckResult(host, addr, c, SKIP) for c in names[names.index(after) + 1:]]


def check_host(index: int, host: hf.Host, p: Params, timeout: float) -> List[CheckResult]:
    """Every check for one host; each step bounded by ``timeout`` (the ssh step by 2x: log in,
    then run)."""
    name = host.name
    rank0 = index == 0
    out: List[CheckResult] = []
    t0 = time.monotonic()
    target = ssh_target(name, p.ssh_port, p.ssh_extra, timeout=max(2.0, min(timeout, 10.0)))
    addrs, why = resolve(target.hostname, timeout)
    if addrs is None:
        via = f" (ssh HostName {target.hostname})" if target.hostname != name else ""
        out.append(CheckResult(name, "", "resolve", FAIL,
                               f"does not resolve{via}: {why} — fix the name in {p.hosts_source} or "
                               "add it to DNS / /etc/hosts", time.monotonic() - t0))
        return out + _skip_rest(name, "", "resolve", p.level)
    addr = addrs[0]
    out.append(CheckResult(name, addr, "resolve", OK, ", ".join(addrs[:3]), time.monotonic() - t0))
    local = is_local(name, addrs) or is_local(target.hostname, addrs)

    if local:
        out.append(CheckResult(name, addr, "ssh-port", SKIP, "local host"))
        out.append(CheckResult(name, addr, "ssh", SKIP, "local host"))
        if p.level != LEVEL_FULL:
            return out
        t1 = time.monotonic()
        try:
            proc = subprocess.run(probe_argv(p, rank0, timeout), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, errors="replace", timeout=2 * timeout)
        except FileNotFoundError:
            out.append(CheckResult(name, addr, "python", FAIL,
                                   f"{p.python} not found — pass --python PATH", time.monotonic() - t1))
            return out + _skip_rest(name, addr, "python", p.level)
        except subprocess.TimeoutExpired:
            out.append(CheckResult(name, addr, "python", FAIL,
                                   f"{p.python} probe did not finish within {2 * timeout:g}s",
                                   time.monotonic() - t1))
            return out + _skip_rest(name, addr, "python", p.level)
        return out + _probe_results(name, addr, proc.returncode, proc.stdout, proc.stderr, p, rank0,
                                    time.monotonic() - t1)

    t1 = time.monotonic()
    if target.error:
        out.append(CheckResult(name, addr, "ssh-port", SKIP))
        out.append(CheckResult(name, addr, "ssh", FAIL, target.error, 0.0))
        return out + _skip_rest(name, addr, "ssh", p.level)
    err = tcp_probe(addr, target.port, timeout)
    if err is not None:
        out.append(CheckResult(name, addr, "ssh-port", FAIL,
                               port_message(err, target.port, timeout, p.port_source), time.monotonic() - t1))
        return out + _skip_rest(name, addr, "ssh-port", p.level)
    out.append(CheckResult(name, addr, "ssh-port", OK, f"port {target.port}", time.monotonic() - t1))

    t2 = time.monotonic()
    remote = "true" if p.level != LEVEL_FULL else remote_command(probe_argv(p, rank0, timeout))
    cmd = ssh_argv(name, p.ssh_port, p.ssh_extra, timeout, remote)
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=2 * timeout)
    except FileNotFoundError:
        out.append(CheckResult(name, addr, "ssh", FAIL, "ssh not found on PATH — install openssh-client"))
        return out + _skip_rest(name, addr, "ssh", p.level)
    except subprocess.TimeoutExpired:
        out.append(CheckResult(name, addr, "ssh", FAIL,
                               f"ssh did not finish within {2 * timeout:g}s — sshd or the login hangs there",
                               time.monotonic() - t2))
        return out + _skip_rest(name, addr, "ssh", p.level)
    if proc.returncode == 255:
        out.append(CheckResult(name, addr, "ssh", FAIL,
                               classify_ssh_error(proc.stderr, target.port, timeout, p.port_source),
                               time.monotonic() - t2))
        return out + _skip_rest(name, addr, "ssh", p.level)
    out.append(CheckResult(name, addr, "ssh", OK, "login ok", time.monotonic() - t2))
    if p.level != LEVEL_FULL:
        if proc.returncode != 0:
            out[-1] = CheckResult(name, addr, "ssh", FAIL,
                                  f"logged in, but 'true' exited {proc.returncode} there: "
                                  f"{_last_line(proc.stderr)} — check the login shell / its start-up files")
        return out
    return out + _probe_results(name, addr, proc.returncode, proc.stdout, proc.stderr, p, rank0,
                                time.monotonic() - t2)


def _probe_results(name, addr, rc, stdout, stderr, p: Params, rank0: bool, seconds: float) -> List[CheckResult]:
    probe = parse_probe_output(stdout)
    if probe is None:
        low = (stderr or "").lower()
        if rc in (126, 127) or "not found" in low or "no such file" in low:
            msg = (f"{p.python} not found there — install the same Python (with mpilaunch and mpi4py) "
                   "at the same path on every host, or pass --python PATH")
        else:
            msg = f"{p.python} probe failed (exit {rc}): {_last_line(stderr) or 'no output'}"
        return [CheckResult(name, addr, "python", FAIL, msg, seconds)] + _skip_rest(name, addr, "python", p.level)
    res = evaluate_probe(name, addr, probe, p, rank0)
    return [CheckResult(r.host, r.addr, r.check, r.status, r.message, seconds if r.check == "python" else 0.0)
            for r in res]


# --------------------------------------------------------------------------- many hosts

def parallel_map(fn: Callable, items: Sequence, workers: int) -> List:
    """fn over items with at most ``workers`` daemon threads; an exception becomes the result."""
    results: List = [None] * len(items)
    lock = threading.Lock()
    position = iter(range(len(items)))

    def work():
        while True:
            with lock:
                i = next(position, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # noqa: BLE001 - reported as a failed check
                results[i] = exc

    threads = [threading.Thread(target=work, name=f"preflight-{n}", daemon=True)
               for n in range(max(1, min(workers, len(items))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run_checks(cfg_or_params, timeout: float = DEFAULT_TIMEOUT, *, level: Optional[str] = None,
               parallel: int = DEFAULT_PARALLEL) -> List[CheckResult]:
    """Check every host of a launch. ``cfg_or_params``: a ``LaunchConfig`` (then ``level``
    defaults to ``"ssh"``: resolve, ssh port, ssh login -- cheap enough before every launch)
    or ``Params``. Returns every result; failures have ``status == "fail"``."""
    if isinstance(cfg_or_params, Params):
        p = cfg_or_params
        if level is not None and level != p.level:
            from dataclasses import replace

            p = replace(p, level=level)
    else:
        p = params_from_config(cfg_or_params, level=level or LEVEL_SSH)
    if timeout <= 0:
        raise UsageError(f"--timeout={timeout:g}: must be more than 0 seconds")
    results: List[CheckResult] = [check_slots(p)]
    hosts = list(enumerate(p.hosts))
    per_host = parallel_map(lambda item: check_host(item[0], item[1], p, timeout), hosts, parallel)
    for (_, host), res in zip(hosts, per_host):
        if isinstance(res, BaseException):
            results.append(CheckResult(host.name, "", "ssh", FAIL, f"internal error: {res!r}"))
        else:
            results.extend(res)
    return results


def failed(results: Iterable[CheckResult]) -> List[CheckResult]:
    return [r for r in results if r.status == FAIL]


def hosts_needing_ssh(hosts: Sequence[hf.Host]) -> bool:
    """True unless every host is plainly this machine (no ssh involved)."""
    return any(not is_local(h.name, []) for h in hosts)


# --------------------------------------------------------------------------- report

def report_lines(results: Sequence[CheckResult], n_hosts: int, elapsed: float, table: Optional[bool] = None,
                 max_per_check: int = MAX_LINES_PER_CHECK) -> List[str]:
    lines: List[str] = []
    for status, tag in ((FAIL, "FAIL"), (WARN, "WARN")):
        by_check: Dict[str, List[CheckResult]] = {}
        for r in results:
            if r.status == status:
                by_check.setdefault(r.check, []).append(r)
        for check, rs in by_check.items():
            for r in rs[:max_per_check]:
                lines.append(f"{tag} {r.line()}")
            if len(rs) > max_per_check:
                lines.append(f"{tag} ... and {len(rs) - max_per_check} more host(s) with the same {check} problem")
    if table is None:
        table = n_hosts <= TABLE_MAX_HOSTS
    if table:
        lines += _table(results)
    bad_hosts = {r.host for r in results if r.status == FAIL and r.host}
    job_fail = [r for r in results if r.status == FAIL and not r.host]
    warns = sum(1 for r in results if r.status == WARN)
    counts: Dict[str, int] = {}
    for r in results:
        if r.status == FAIL:
            counts[r.check] = counts.get(r.check, 0) + 1
    what = ", ".join(f"{c} {n}" for c, n in counts.items())
    if bad_hosts or job_fail:
        lines.append(f"mpilaunch check: FAILED — {len(bad_hosts)} of {n_hosts} host(s) failed"
                     f"{' and a job-wide check' if job_fail else ''} ({what}); {warns} warning(s); "
                     f"{elapsed:.1f}s")
    else:
        lines.append(f"mpilaunch check: OK — {n_hosts} host(s) passed; {warns} warning(s); {elapsed:.1f}s")
    return lines


def _table(results: Sequence[CheckResult]) -> List[str]:
    order: List[str] = []
    cells: Dict[str, Dict[str, str]] = {}
    addr: Dict[str, str] = {}
    for r in results:
        if not r.host:
            continue
        if r.host not in cells:
            order.append(r.host)
            cells[r.host] = {}
        if r.addr:
            addr[r.host] = r.addr
        cells[r.host][r.check] = {OK: "ok", FAIL: "FAIL", WARN: "warn", SKIP: "-"}[r.status]
    if not order:
        return []
    used = [c for c in CHECKS if any(c in cells[h] for h in order)]
    hw = max(4, *(len(h) for h in order))
    aw = max(7, *(len(addr.get(h, "")) for h in order))
    head = f"{'HOST':<{hw}}  {'ADDRESS':<{aw}}  " + "  ".join(c.upper() for c in used)
    out = [head]
    for h in order:
        row = f"{h:<{hw}}  {addr.get(h, ''):<{aw}}  "
        row += "  ".join(f"{cells[h].get(c, '-'):<{len(c)}}" for c in used)
        out.append(row.rstrip())
    return out


# --------------------------------------------------------------------------- command

def _parser():
    from mpilaunch import options

    return options.parser(options.CHECK)


def _number(value, flag: str, cast, lo) -> float:
    try:
        number = cast(str(value).strip())
    except ValueError:
        raise UsageError(f"{flag}={value!r}: must be a number") from None
    if not number > lo or (isinstance(number, float) and not math.isfinite(number)):
        raise UsageError(f"{flag}={value!r}: must be more than {lo}")
    return number


def main(argv: Sequence[str]) -> int:
    from mpilaunch import config, mpi

    args = _parser().parse_args(list(argv))
    timeout = _number(args.check_timeout, "--timeout", float, 0) if args.check_timeout is not None else DEFAULT_TIMEOUT
    parallel = int(_number(args.check_parallel, "--parallel", int, 0)) if args.check_parallel is not None \
        else DEFAULT_PARALLEL
    env = dict(os.environ)
    script_given = args.script is not None
    if not script_given:      # the launcher's config wants a script; a check does not
        args.script, args.no_python, args.script_args = "true", True, []
    user_oversubscribe = bool(args.oversubscribe)
    args.oversubscribe = True  # np > slots is reported as the 'slots' check, not a usage error
    cfg = config.build(args, env)
    level = LEVEL_SSH if args.check_ssh_only else LEVEL_FULL
    info = mpi.detect(cfg.mpirun, env) if level == LEVEL_FULL else None
    p = params_from_config(cfg, level=level, mpi_info=info, oversubscribe=user_oversubscribe,
                           check_script=script_given)
    what = f"{len(p.hosts)} host(s) from {cfg.hosts_source}, np {p.np}, python {p.python}"
    if info is not None:
        what += f", Open MPI {info.version_str} ({info.path})"
    print(f"mpilaunch check: {what}, mpilaunch {mpilaunch.__version__}, time-out {timeout:g}s per check",
          flush=True)
    t0 = time.monotonic()
    results = run_checks(p, timeout, parallel=parallel)
    for line in report_lines(results, len(p.hosts), time.monotonic() - t0, table=True if args.check_table else None):
        print(line)
    sys.stdout.flush()
    return 1 if failed(results) else 0
