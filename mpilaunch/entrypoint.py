"""``mpilaunch job [job options] [launcher options] SCRIPT [ARGS...]``: a ModelArts-like entrypoint.

Every host of a job runs this same command. The platform describes the job in variables:

================  =============================================================
``VC_WORKER_HOSTS``  comma list of the job's hosts (index 0 = worker-0)
``VC_TASK_INDEX``    this host's index in that list
``MA_NUM_GPUS``      slots per host (``--local_worker_num`` wins; default 1)
``SSHD_PORT``        sshd port on every host (``--ssh-port`` wins)
================  =============================================================

**Worker-0** writes the hostfile (``VC_WORKER_HOSTS`` x ``MA_NUM_GPUS``) into a private 0700
directory, validates the launch, waits until every other host is *ready* (bounded by
``--wait-hosts``, default 300 s; a live count on stderr), runs the launcher (the same code as
``mpilaunch [options] SCRIPT``) and, whatever happens (success, failure, usage error, signal),
tells every other host the job's exit status, then exits with it.

**Every other host** keeps its sshd serving (the platform runs sshd, not us) and waits:

* It listens on an abstract unix socket ``@mpilaunch-job-<key>-<index>`` (per network
  namespace, so per host/container; no file to go stale; a peer must have our uid or be
  root, checked with ``SO_PEERCRED``). ``<key>`` hashes ``VC_WORKER_HOSTS``, the ssh port and
  ``MPILAUNCH_JOB_ID`` (if set), so two jobs over other hosts never meet.
* Worker-0 reaches it over ssh (the same ssh the launch itself needs: no extra port):
  ``ssh host <python> -c <one-liner> <socket> <message>``, the one-liner connects to the socket
  and relays one JSON line. ``hello`` is the readiness probe ("ready" = ssh login works *and*
  this host's ``mpilaunch job`` is waiting, so the final status cannot be missed); ``done``
  carries the exit status, with which the waiting entrypoint exits.
* If worker-0 disappears: every 5 s (no busy polling; stretched for big jobs so that all
  hosts together make at most 20 connects a second, and ``--lost-after`` raised to 3 such
  intervals) the waiting host connects to worker-0's sshd port; once worker-0 has been in
  touch, ``--lost-after`` seconds (default 60) without an answer end the wait with status 1. If worker-0 never gets in touch within
  ``2 x --wait-hosts`` (or its sshd, once seen, stops answering for ``--lost-after``), the
  wait ends with status 1 too. (On a platform worker-0's container -- and its sshd -- end
  with its entrypoint, so a lost worker-0 always shows as a silent sshd port.)

Without platform variables, ``job`` is a plain launch (``--hostfile`` etc. as usual).
Bad or missing variables are a ``UsageError`` naming the variable.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mpilaunch import hostfile as hf
from mpilaunch import preflight as pf
from mpilaunch.errors import UsageError

DEFAULT_WAIT_HOSTS = 300.0
DEFAULT_LOST_AFTER = 60.0
LIVENESS_EVERY = 5.0          # waiting hosts: seconds between checks of worker-0's sshd port ...
LIVENESS_MAX_RATE = 20.0      # ... but all of them together at most this many connects a second
ROUND_EVERY = 1.0             # worker-0: at most one readiness round (and one status line) per second
REPEAT_STATUS_EVERY = 10.0    # worker-0: repeat an unchanged status line this often
PEER_TIMEOUT = 10.0           # per host: resolve / connect / ssh log-in bound for hello and done
LOST_STATUS = 1
USAGE_TELL_WITHIN = 60.0      # worker-0: after a usage error, how long to try to tell the others
PEER_MARK = "@@mpilaunch-peer "
JOB_OPTIONS = ("--wait-hosts", "--lost-after")

# Runs on a peer host (over ssh) with worker-0's interpreter path: relays one JSON line to the
# waiting entrypoint's abstract socket and prints its reply. Exit 3: nobody is listening.
PEER_CODE = r'''
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(10)
try:
    s.connect("\0" + sys.argv[1])
except OSError as e:
    sys.stdout.write("@@mpilaunch-peer " + json.dumps({"ok": False, "error": "not-listening", "detail": str(e)}) + "\n")
    sys.exit(3)
s.sendall(sys.argv[2].encode() + b"\n"); data = b""
while not data.endswith(b"\n") and len(data) < 65536:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
sys.stdout.write("@@mpilaunch-peer " + (data.decode("utf-8", "replace").strip() or "{}") + "\n")
'''


def _log(message: str) -> None:
    print(f"mpilaunch: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the job

@dataclass(frozen=True)
class JobSpec:
    hosts: Tuple[str, ...]
    index: int
    slots: int
    ssh_port: Optional[int]
    ssh_extra: Tuple[str, ...]
    key: str

    @property
    def worker0(self) -> str:
        return self.hosts[0]

    def socket_name(self, index: int) -> str:
        return f"mpilaunch-job-{self.key}-{index}"


def job_key(hosts: Sequence[str], ssh_port: Optional[int], job_id: str = "") -> str:
    text = "\n".join([",".join(hosts), str(ssh_port or ""), job_id])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _whole(value, name: str, lo: int, hi: Optional[int] = None) -> int:
    try:
        number = int(str(value).strip(), 10)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a whole number") from None
    if number < lo or (hi is not None and number > hi):
        raise UsageError(f"{name}={number} must be {'between %d and %d' % (lo, hi) if hi is not None else 'at least %d' % lo}")
    return number


def job_spec(env: Mapping[str, str], args) -> Optional[JobSpec]:
    """The platform's description of the job, or None when no platform variables are set."""
    raw_hosts = env.get("VC_WORKER_HOSTS", "")
    raw_index = env.get("VC_TASK_INDEX")
    if not raw_hosts.strip():
        if raw_index is not None and raw_index.strip():
            raise UsageError(f"VC_TASK_INDEX={raw_index} is set but VC_WORKER_HOSTS is not; "
                             "set both (or neither, for a plain launch)")
        return None
    if args.hostfile is not None or args.host is not None:
        raise UsageError("mpilaunch job takes its hosts from VC_WORKER_HOSTS; drop --hostfile/-H "
                         "(or unset VC_WORKER_HOSTS for a plain launch)")
    hosts = tuple(h.name for h in hf.parse_host_list(raw_hosts, "VC_WORKER_HOSTS"))
    if raw_index is None or not raw_index.strip():
        raise UsageError(f"VC_TASK_INDEX is not set (VC_WORKER_HOSTS lists {len(hosts)} hosts): "
                         "every host needs its index, 0 for worker-0")
    try:
        index = int(raw_index.strip(), 10)
    except ValueError:
        raise UsageError(f"VC_TASK_INDEX={raw_index!r} is not a whole number") from None
    if not 0 <= index < len(hosts):
        raise UsageError(f"VC_TASK_INDEX={index} is outside VC_WORKER_HOSTS ({len(hosts)} hosts)")
    if args.local_worker_num is not None:
        slots = _whole(args.local_worker_num, "--local_worker_num", 1)
    elif env.get("MA_NUM_GPUS", "").strip():
        slots = _whole(env["MA_NUM_GPUS"], "MA_NUM_GPUS", 1)
    else:
        slots = 1
    if args.ssh_port is not None:
        port: Optional[int] = _whole(args.ssh_port, "--ssh-port", 1, 65535)
    elif env.get("SSHD_PORT", "").strip():
        port = _whole(env["SSHD_PORT"], "SSHD_PORT", 1, 65535)
    else:
        port = None
    from mpilaunch.render import split_arg_string

    extra = tuple(split_arg_string(args.ssh_args, "--ssh-args")) if args.ssh_args else ()
    key = job_key(hosts, port, env.get("MPILAUNCH_JOB_ID", ""))
    return JobSpec(hosts, index, slots, port, extra, key)


def _parser():
    from mpilaunch import options

    return options.parser(options.JOB)


def split_argv(argv: Sequence[str]):
    """-> (parsed namespace incl. job options, launcher argv without the job options).

    The script and its arguments are left exactly as given (job options after the script
    belong to the script)."""
    argv = list(argv)
    args = _parser().parse_args(argv)
    if args.script is None:
        head, tail = argv, []
    else:
        cut = len(argv) - len(args.script_args) - 1
        if cut < 0 or argv[cut] != args.script:
            raise UsageError("cannot tell the script from the options; put the options before SCRIPT")
        head, tail = argv[:cut], argv[cut:]
    out: List[str] = []
    i = 0
    while i < len(head):
        tok = head[i]
        name = tok.split("=", 1)[0]
        if name in JOB_OPTIONS:
            i += 1 if "=" in tok else 2
            continue
        out.append(tok)
        i += 1
    return args, out + tail


def _seconds(value, flag: str, default: float) -> float:
    if value is None:
        return default
    try:
        number = float(str(value).strip())
    except ValueError:
        raise UsageError(f"{flag}={value!r}: must be a number of seconds") from None
    if not number > 0 or number != number or number == float("inf"):
        raise UsageError(f"{flag}={value!r}: must be more than 0 seconds")
    return number


# --------------------------------------------------------------------------- talking to peers

@dataclass(frozen=True)
class PeerReply:
    ok: bool
    reply: Optional[dict]
    why: str
    addr: str = ""


def peer_call(spec: JobSpec, index: int, message: dict, python: str, timeout: float = PEER_TIMEOUT) -> PeerReply:
    """Deliver one JSON message to host ``index``'s waiting entrypoint (over ssh unless local)."""
    host = spec.hosts[index]
    target = pf.ssh_target(host, spec.ssh_port, spec.ssh_extra, timeout=min(timeout, 5.0))
    addrs, why = pf.resolve(target.hostname, timeout)
    if addrs is None:
        return PeerReply(False, None, f"does not resolve: {why}")
    addr = addrs[0]
    argv = [python, "-c", PEER_CODE, spec.socket_name(index), json.dumps(message, sort_keys=True)]
    if pf.is_local(host, addrs) or pf.is_local(target.hostname, addrs):
        cmd = argv
    else:
        if target.error:
            return PeerReply(False, None, target.error, addr)
        err = pf.tcp_probe(addr, target.port, timeout)
        if err is not None:
            return PeerReply(False, None, pf.port_message(err, target.port, timeout, "SSHD_PORT/--ssh-port"), addr)
        cmd = pf.ssh_argv(host, spec.ssh_port, spec.ssh_extra, timeout, pf.remote_command(argv))
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=2 * timeout)
    except FileNotFoundError as exc:
        return PeerReply(False, None, f"cannot run {cmd[0]}: {exc.strerror}", addr)
    except subprocess.TimeoutExpired:
        return PeerReply(False, None, f"no reply within {2 * timeout:g}s", addr)
    if proc.returncode == 255 and cmd[0] == "ssh":
        return PeerReply(False, None, pf.classify_ssh_error(proc.stderr, target.port, timeout), addr)
    reply = None
    for line in proc.stdout.splitlines():
        if line.startswith(PEER_MARK):
            try:
                reply = json.loads(line[len(PEER_MARK):])
            except ValueError:
                reply = None
    if reply is None:
        return PeerReply(False, None, f"{python} failed there (exit {proc.returncode}): "
                                      f"{pf._last_line(proc.stderr) or 'no output'}", addr)
    if reply.get("error") == "not-listening":
        return PeerReply(False, reply, f"ssh works, but no `mpilaunch job` is waiting there yet "
                                       f"(VC_TASK_INDEX={index})", addr)
    if not reply.get("ok"):
        return PeerReply(False, reply, f"its entrypoint refused: {reply.get('error', reply)}", addr)
    return PeerReply(True, reply, "", addr)


def _names(waiting: Sequence[Tuple[str, str]], limit: int = 4) -> str:
    shown = [n for n, _ in waiting[:limit]]
    more = f" +{len(waiting) - limit} more" if len(waiting) > limit else ""
    text = ", ".join(shown) + more
    if len(waiting) == 1 and waiting[0][1]:
        text += f": {waiting[0][1]}"
    return text


class Progress:
    """``mpilaunch: 2/3 hosts ready (waiting for node-c)`` -- printed when it changes, and
    repeated every REPEAT_STATUS_EVERY seconds while it does not."""

    def __init__(self, total: int, out: Callable[[str], None] = _log):
        self.total = total
        self.out = out
        self.last = None
        self.when = 0.0

    def show(self, ready: int, waiting: Sequence[Tuple[str, str]], now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        text = f"{ready}/{self.total} hosts ready"
        if waiting:
            text += f" (waiting for {_names(waiting)})"
        if text != self.last or now - self.when >= REPEAT_STATUS_EVERY:
            self.out(text)
            self.last, self.when = text, now


def wait_for_peers(spec: JobSpec, python: str, wait_s: float, parallel: int = pf.DEFAULT_PARALLEL,
                   call: Callable = peer_call) -> Dict[int, str]:
    """Worker-0: until every other host answers ``hello``. -> {} on success, else
    {index: why} for the hosts still not ready when ``wait_s`` ran out."""
    pending = {i: "" for i in range(len(spec.hosts)) if i != spec.index}
    progress = Progress(len(spec.hosts))
    deadline = time.monotonic() + wait_s
    while True:
        progress.show(len(spec.hosts) - len(pending), [(spec.hosts[i], w) for i, w in sorted(pending.items())])
        if not pending:
            return {}
        started = time.monotonic()
        left = deadline - started
        if left <= 0:
            return pending
        each = max(1.0, min(PEER_TIMEOUT, left / 2))
        order = sorted(pending)
        replies = pf.parallel_map(lambda i: call(spec, i, {"op": "hello", "key": spec.key}, python, each),
                                  order, parallel)
        for i, rep in zip(order, replies):
            if isinstance(rep, BaseException):
                pending[i] = f"internal error: {rep!r}"
            elif rep.ok:
                del pending[i]
            else:
                pending[i] = rep.why
        pause = ROUND_EVERY - (time.monotonic() - started)
        if pending and pause > 0:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))


def notify_peers(spec: JobSpec, status: int, python: str, within: float = PEER_TIMEOUT,
                 parallel: int = pf.DEFAULT_PARALLEL, call: Callable = peer_call) -> Dict[int, str]:
    """Worker-0: tell every other host the job's exit status, retrying (one round a second)
    the hosts not reached yet for up to ``within`` seconds. -> {index: why} for failures."""
    pending = {i: "" for i in range(len(spec.hosts)) if i != spec.index}
    deadline = time.monotonic() + within
    while pending:
        started = time.monotonic()
        each = max(1.0, min(PEER_TIMEOUT, deadline - started))
        order = sorted(pending)
        replies = pf.parallel_map(
            lambda i: call(spec, i, {"op": "done", "status": status, "key": spec.key}, python, each),
            order, parallel)
        for i, rep in zip(order, replies):
            if isinstance(rep, BaseException):
                pending[i] = repr(rep)
            elif rep.ok:
                del pending[i]
            else:
                pending[i] = rep.why
        if not pending or time.monotonic() + ROUND_EVERY > deadline:
            break
        time.sleep(max(0.0, ROUND_EVERY - (time.monotonic() - started)))
    return pending


# --------------------------------------------------------------------------- the other hosts

class Waiter:
    """A non-zero host: wait for worker-0's ``done`` (exit with its status), or give up when
    worker-0 is gone. ``alive()`` says whether worker-0 answers (its sshd port)."""

    def __init__(self, spec: JobSpec, alive: Callable[[], bool], lost_after: float, contact_within: float,
                 liveness_every: float = LIVENESS_EVERY):
        self.spec = spec
        self.alive = alive
        self.lost_after = lost_after
        self.contact_within = contact_within
        self.liveness_every = liveness_every
        self.contacted = False
        self.seen_alive = False
        self.last_alive = time.monotonic()
        self._stop = threading.Event()
        self.sock: Optional[socket.socket] = None

    def bind(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + self.spec.socket_name(self.spec.index))
        except OSError as exc:
            sock.close()
            raise UsageError(f"another `mpilaunch job` for these hosts already waits on this host "
                             f"(VC_TASK_INDEX={self.spec.index}): {exc.strerror}") from None
        sock.listen(128)
        self.sock = sock

    def _liveness(self) -> None:
        # spread the first probes of many hosts started at once over one interval
        if self._stop.wait(random.uniform(0, self.liveness_every) if self.liveness_every > 1 else 0):
            return
        while not self._stop.is_set():
            try:
                ok = bool(self.alive())
            except Exception:  # noqa: BLE001
                ok = False
            if ok:
                self.last_alive = time.monotonic()
                self.seen_alive = True
            self._stop.wait(self.liveness_every)

    def _handle(self, conn: socket.socket) -> Optional[int]:
        conn.settimeout(5.0)
        try:
            pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                 struct.calcsize("3i")))
            if uid not in (os.getuid(), 0):
                return None
            data = b""
            while not data.endswith(b"\n") and len(data) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            try:
                msg = json.loads(data.decode("utf-8", "replace") or "{}")
            except ValueError:
                msg = {}
            if not isinstance(msg, dict) or msg.get("key") != self.spec.key:
                conn.sendall(json.dumps({"ok": False, "error": "wrong job key"}).encode() + b"\n")
                return None
            op = msg.get("op")
            if op == "hello":
                if not self.contacted:
                    _log(f"job: worker-0 ({self.spec.worker0}) is in touch; waiting for the job to end")
                self.contacted = True
                self.last_alive = time.monotonic()
                conn.sendall(json.dumps({"ok": True, "index": self.spec.index, "pid": os.getpid(),
                                         "hostname": socket.gethostname()}).encode() + b"\n")
                return None
            if op == "done":
                try:
                    status = int(msg.get("status"))
                except (TypeError, ValueError):
                    status = 1
                status = status if 0 <= status <= 255 else 1
                conn.sendall(json.dumps({"ok": True, "index": self.spec.index}).encode() + b"\n")
                return status
            conn.sendall(json.dumps({"ok": False, "error": f"unknown op {op!r}"}).encode() + b"\n")
            return None
        except OSError:
            return None
        finally:
            conn.close()

    def serve(self) -> int:
        if self.sock is None:
            self.bind()
        started = time.monotonic()
        watcher = threading.Thread(target=self._liveness, name="worker0-liveness", daemon=True)
        watcher.start()
        try:
            while True:
                ready, _, _ = select.select([self.sock], [], [], 1.0)
                if ready:
                    try:
                        conn, _ = self.sock.accept()
                    except OSError:
                        conn = None
                    if conn is not None:
                        status = self._handle(conn)
                        if status is not None:
                            _log(f"job: worker-0 ({self.spec.worker0}) reports the job ended with status {status}")
                            return status
                now = time.monotonic()
                if (self.contacted or self.seen_alive) and now - self.last_alive > self.lost_after:
                    _log(f"job: worker-0 ({self.spec.worker0}) has not answered for {now - self.last_alive:.0f}s "
                         f"(--lost-after {self.lost_after:g}); giving up, status {LOST_STATUS}")
                    return LOST_STATUS
                if not self.contacted and now - started > self.contact_within:
                    _log(f"job: worker-0 ({self.spec.worker0}) did not get in touch within "
                         f"{self.contact_within:g}s (is `mpilaunch job` running there with the same "
                         f"VC_WORKER_HOSTS and SSHD_PORT?); giving up, status {LOST_STATUS}")
                    return LOST_STATUS
        finally:
            self._stop.set()
            self.sock.close()


def liveness_every(n_hosts: int) -> float:
    """Seconds between a waiting host's probes of worker-0's sshd: LIVENESS_EVERY, stretched
    so that all waiting hosts together stay under LIVENESS_MAX_RATE connects a second (each
    probe makes worker-0's sshd fork a pre-auth child)."""
    return max(LIVENESS_EVERY, (n_hosts - 1) / LIVENESS_MAX_RATE)


def worker0_alive_probe(spec: JobSpec) -> Callable[[], bool]:
    """A function: does worker-0's sshd port accept a TCP connection (3 s bound)?"""
    cache: Dict[str, object] = {}

    def alive() -> bool:
        if "target" not in cache:
            target = pf.ssh_target(spec.worker0, spec.ssh_port, spec.ssh_extra)
            addrs, _ = pf.resolve(target.hostname, 5.0)
            if addrs is None:
                return False
            cache["target"] = (addrs[0], target.port)
        addr, port = cache["target"]  # type: ignore[misc]
        return pf.tcp_probe(addr, port, 3.0) is None

    return alive


# --------------------------------------------------------------------------- worker-0

class _Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, _frame):
    raise _Interrupted(signum)


def write_hostfile(spec: JobSpec, run_dir: str) -> str:
    path = os.path.join(run_dir, "hostfile")
    text = hf.render_hostfile([hf.Host(h, spec.slots) for h in spec.hosts])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


def run_worker0(spec: JobSpec, args, launcher_argv: List[str], env: Mapping[str, str], wait_s: float) -> int:
    from mpilaunch import config, options, run

    python = sys.executable
    _log(f"job: worker-0 of {len(spec.hosts)} host(s) ({spec.worker0}), {spec.slots} slot(s) per host")
    run_dir = tempfile.mkdtemp(prefix="mpilaunch-job-")
    os.chmod(run_dir, 0o700)
    status = 1
    tell_within = PEER_TIMEOUT        # after a launch every peer was ready: one short round
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            hostfile_path = write_hostfile(spec, run_dir)
            run_argv = ["--hostfile", hostfile_path] + list(launcher_argv)
            config.build(options.parser(options.RUN).parse_args(run_argv), env)   # usage errors now, before waiting
            if not args.dry_run and len(spec.hosts) > 1:
                missing = wait_for_peers(spec, python, wait_s)
                if missing:
                    _log(f"job: gave up after {wait_s:g}s (--wait-hosts); not ready:")
                    for i, why in sorted(missing.items())[:pf.MAX_LINES_PER_CHECK]:
                        _log(f"  {spec.hosts[i]}: {why or 'no answer yet'}")
                    if len(missing) > pf.MAX_LINES_PER_CHECK:
                        _log(f"  ... and {len(missing) - pf.MAX_LINES_PER_CHECK} more")
                    return status
            for s, h in previous.items():   # the launcher handles signals itself from here
                signal.signal(s, h)
            # every host was just seen ready over ssh: no second preflight
            status = run.main(["--no-preflight"] + run_argv if len(spec.hosts) > 1 else run_argv)
            return status
        except UsageError as exc:
            # Shown now; then the waiting hosts (some maybe not up yet) learn status 2.
            status = 2
            print(f"mpilaunch: error: {exc}", file=sys.stderr, flush=True)
            tell_within = min(wait_s, USAGE_TELL_WITHIN)
            return status
        except KeyboardInterrupt:
            status = 130
            raise
        except _Interrupted as exc:
            status = 128 + exc.signum
            _log(f"job: {signal.Signals(exc.signum).name} received while waiting for the hosts; stopping")
            return status
    finally:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)   # one notification round, not interrupted
        try:
            if len(spec.hosts) > 1:
                failed = notify_peers(spec, status, python, within=tell_within)
                for i, why in sorted(failed.items())[:pf.MAX_LINES_PER_CHECK]:
                    _log(f"job: could not tell {spec.hosts[i]} that the job ended ({why}); it stops by "
                         "itself when worker-0 is gone (--lost-after)")
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            shutil.rmtree(run_dir, ignore_errors=True)


# --------------------------------------------------------------------------- command

def main(argv: Sequence[str]) -> int:
    from mpilaunch import run

    args, launcher_argv = split_argv(argv)
    wait_s = _seconds(args.wait_hosts, "--wait-hosts", DEFAULT_WAIT_HOSTS)
    lost_after = _seconds(args.lost_after, "--lost-after", DEFAULT_LOST_AFTER)
    env = dict(os.environ)
    spec = job_spec(env, args)
    if spec is None:                      # no platform variables: a plain launch
        return run.main(launcher_argv)
    if spec.index == 0:
        return run_worker0(spec, args, launcher_argv, env, wait_s)
    every = liveness_every(len(spec.hosts))
    if every > LIVENESS_EVERY and lost_after < 3 * every:
        _log(f"job: --lost-after raised from {lost_after:g}s to {3 * every:g}s: {len(spec.hosts)} hosts probe "
             f"worker-0 every {every:g}s each")
        lost_after = 3 * every
    waiter = Waiter(spec, worker0_alive_probe(spec), lost_after, contact_within=2 * wait_s, liveness_every=every)
    waiter.bind()
    _log(f"job: host {spec.index} of {len(spec.hosts)} ({spec.hosts[spec.index]}); worker-0 "
         f"({spec.worker0}) runs the job, waiting for it to end")
    return waiter.serve()
