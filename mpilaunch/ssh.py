"""ssh and TCP primitives shared by ``mpilaunch check`` and ``mpilaunch job``.

Nothing here decides what a check or a job means: where ssh really goes for a host
(:func:`ssh_target`, from ``ssh -G``), the non-interactive ssh argv (:func:`ssh_argv`), the one
string the remote shell parses (:func:`remote_command`), name lookup and TCP connect with a
time-out (:func:`tcp_probe`), one-line explanations of ssh / connect failures with their fix
(:func:`classify_ssh_error`, :func:`port_message`), and a bounded pool of daemon threads
(:func:`parallel_map`). Name look-ups and "is this host here" are mpilaunch/net.py's.
No ``shell=True`` anywhere: ssh gets an argv, the remote side one ``shlex``-quoted string.
"""
from __future__ import annotations

import errno
import math
import os
import shlex
import socket
import subprocess
import threading
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, TypeVar, Union

T = TypeVar("T")
R = TypeVar("R")

from mpilaunch import net

PORT_SOURCE = "SSHD_PORT/--ssh-port"    # where the ssh port comes from, for messages
NO_SSH = "ssh not found on PATH — install openssh-client"


class SshTarget(NamedTuple):
    """Where ssh really goes for a listed host (``ssh -G`` applies -F configs, -p, ...).
    ``error``: ``ssh -G`` failed, why (the ssh step fails with it)."""

    name: str
    hostname: str
    port: int
    error: Optional[str] = None


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


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (what a failing program said last), or ``""``."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def ssh_target(name: str, port: Optional[int], extra: Sequence[str], timeout: float = 5.0) -> SshTarget:
    default_port = port if port is not None else 22
    try:
        proc = subprocess.run(ssh_base(port, extra) + ["-G", name], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace", timeout=timeout)
    except FileNotFoundError:
        return SshTarget(name, name, default_port, NO_SSH)
    except subprocess.TimeoutExpired:
        return SshTarget(name, name, default_port, f"'ssh -G {name}' did not answer within {timeout:g}s")
    if proc.returncode != 0:
        why = last_line(proc.stderr) or f"exit {proc.returncode}"
        return SshTarget(name, name, default_port, f"ssh rejects its options ({why}) — fix --ssh-args/--ssh-port")
    opts = parse_ssh_G(proc.stdout)
    try:
        real_port = int(opts.get("port", default_port))
    except ValueError:
        real_port = default_port
    return SshTarget(name, opts.get("hostname") or name, real_port)


def ssh_argv(name: str, port: Optional[int], extra: Sequence[str], timeout: float,
             remote: Optional[str]) -> List[str]:
    """Non-interactive ssh running ``remote`` (one argv element, parsed by the remote shell);
    ``remote=None``: log in only (``-N``; with ControlPersist ssh returns once authenticated,
    leaving the master: no remote session, 0.1 s less per launch here)."""
    return ssh_base(port, extra) + [
        "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(math.ceil(timeout)))}",
        "-T", name] + (["-N"] if remote is None else [remote])


def remote_command(argv: Sequence[str]) -> str:
    """argv -> the single string ssh hands to the remote shell (each word quoted)."""
    return " ".join(shlex.quote(a) for a in argv)


def classify_ssh_error(stderr: str, port: int, timeout: float, port_source: str = PORT_SOURCE) -> str:
    """ssh exit 255 -> one line: what went wrong and the fix."""
    text = stderr or ""
    low = text.lower()
    detail = last_line(text)
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


# --------------------------------------------------------------------------- one handshake per host
# The launch preflight's ssh login opens a control master per host (a socket in the launcher's
# private 0700 run dir); mpirun's own ssh (Open MPI's plm_rsh/ssh_args, Hydra's launcher args)
# is given the same ControlPath with ControlMaster=no, so it runs its daemon through the open
# connection instead of a second handshake, and falls back to a normal connection where no
# socket exists (e.g. a tree-spawned daemon's ssh on another host). The masters are closed
# with ``ssh -O exit`` when the job ends; ControlPersist bounds a master whose launcher was
# SIGKILLed (it exits after that long without a session).
MUX_NAME = "cm-%C"            # %C: hash of local host, remote host, port, user (40 hex)
MUX_PERSIST = 15              # s a master lingers with no session
KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 5, 5   # s, probes: see keepalive_options
MUX_MAX_HOSTS = 256           # one master process per host: not for thousands of hosts
_SUN_PATH_MAX = 104 - 17      # ssh binds "<path>.<16 random chars>" first, then renames


def mux_path(run_dir: Optional[str], n_hosts: int) -> Optional[str]:
    """The ControlPath template for a launch, or None (no run dir, too many hosts, a path too
    long for a unix socket, or a character Open MPI / Hydra would split the ssh args at)."""
    if not run_dir or n_hosts > MUX_MAX_HOSTS:
        return None
    path = os.path.join(run_dir, MUX_NAME)
    if len(path) - 2 + 40 > _SUN_PATH_MAX or any(c.isspace() or c in "'\"\\" for c in path):
        return None
    return path


def mux_master_options(path: Optional[str]) -> List[str]:
    """For the preflight's login: become (or reuse) the master, keep it after the login."""
    if not path:
        return []
    return ["-o", "ControlMaster=auto", "-o", f"ControlPath={path}",
            "-o", f"ControlPersist={MUX_PERSIST}", *keepalive_options()]


def keepalive_options() -> List[str]:
    """ssh-level keepalive: a host whose link died is given up after ~25-30 s, so the ssh
    sessions carried by this connection (mpirun's / Hydra's, which start the daemons or
    proxies) end; the launcher watches Hydra's (hydra_report.ProxyWatch: MPICH and Intel MPI
    otherwise wait forever on a link-down host). Later than Open MPI's own daemon keepalive
    (~19 s, render.KEEPALIVE), which still decides there."""
    return ["-o", f"ServerAliveInterval={KEEPALIVE_INTERVAL}", "-o", f"ServerAliveCountMax={KEEPALIVE_COUNT}"]


def start_options(timeout: float) -> List[str]:
    """For the starter's own ssh when no preflight ran before it (Open MPI: run.py): never a
    prompt (a password or host-key question would stop the background mpirun for good), and a
    host that does not answer fails within ``timeout`` s instead of TCP's ~2 minutes; the failed
    daemon start is then explained by the preflight's own checks (backends/openmpi.py, after).
    Appended after the user's options: ssh takes the first value given, so theirs win."""
    return ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(math.ceil(timeout)))}"]


def mux_client_options(path: Optional[str]) -> List[str]:
    """For mpirun's ssh: use an open master, never become one (no socket -> plain ssh)."""
    if not path:
        return []
    return ["-o", "ControlMaster=no", "-o", f"ControlPath={path}"]


def mux_sockets(run_dir: str) -> List[str]:
    try:
        return [os.path.join(run_dir, n) for n in sorted(os.listdir(run_dir))
                if n.startswith(MUX_NAME[:3])]
    except OSError:
        return []


def close_masters(run_dir: Optional[str], timeout: float = 5.0) -> int:
    """``ssh -O exit`` every control master of ``run_dir`` (all at once). -> how many were
    asked. Never raises: closing is cleanup."""
    if not run_dir:
        return 0
    socks = mux_sockets(run_dir)
    procs = []
    for sock in socks:
        try:
            procs.append(subprocess.Popen(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "mpilaunch-mux"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except OSError:
            break
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return len(procs)


# --------------------------------------------------------------------------- resolve / connect

# Name look-up with a time-out lives in mpilaunch/net.py with the other network facts; the
# name here is kept for callers that still say ssh.resolve.
resolve = net.resolve


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


def port_message(err: int, port: int, timeout: float, port_source: str = PORT_SOURCE) -> str:
    """A :func:`tcp_probe` errno on an ssh port -> one line with the fix."""
    if err == errno.ECONNREFUSED:
        return f"ssh port {port} closed — is sshd running there? ({port_source})"
    if err == errno.ETIMEDOUT:
        return f"no answer on ssh port {port} within {timeout:g}s — host down, unreachable or firewalled"
    if err in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"unreachable ({os.strerror(err)}) — host down or no network route to it"
    return f"cannot connect to ssh port {port} ({os.strerror(err)})"


# --------------------------------------------------------------------------- many hosts

def parallel_map(fn: Callable[[T], R], items: Sequence[T],
                 workers: int) -> List[Union[R, BaseException]]:
    """fn over items with at most ``workers`` daemon threads; an exception becomes the result."""
    results: List[Union[R, BaseException]] = [BaseException("not run")] * len(items)
    lock = threading.Lock()
    position = iter(range(len(items)))

    def work() -> None:
        while True:
            with lock:
                i = next(position, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # noqa: BLE001 - the caller reports it per item
                results[i] = exc

    threads = [threading.Thread(target=work, name=f"mpilaunch-pool-{n}", daemon=True)
               for n in range(max(1, min(workers, len(items))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
