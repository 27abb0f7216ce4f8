"""The deep check's agent: one per host, for ``mpilaunch check --deep`` (mpilaunch/check/deep.py
drives it).

The check's probe (mpilaunch/check/probe.py), already running in its ssh session on the host,
binds a TCP port, forks, and the child runs :func:`serve` from this source (sent in the
probe's argument): no second ssh session and no second interpreter start per host, which on
the 2-core test machine cost ~0.15 s of CPU per host. The child leaves the session (setsid,
stdio on /dev/null) so the probe's ssh ends as before. Standard library only (numpy when
asked for and importable), so what it measures does not depend on how mpilaunch is installed.

Every connection starts with one JSON line carrying the check's random token; without it
the connection is dropped. A command connection (``"cmd": 1``, the checker's; one) gets a
``hello`` line (host name, kernel boot id, CPUs and CPU quota, devices), then one answer
line per command line:

* ``compute`` -- one forked process per slot repeats a fixed unit of work (a 128x128 float64
  GEMM with numpy, one thread each; else a fixed pure-Python loop) for a fixed window, and
  counts: units per second, per slot. A window, not a fixed count, so a host 100x slower
  still answers within the budget.
* ``memory`` -- copies a 16 MiB buffer for a window: bytes per second of CPU time.
* ``disk`` -- free space of the log dir (or its nearest existing parent) and the speed of
  writing a file there with fsync (removed after).
* ``send`` -- a test connection to another agent over the route the ranks use: round trips
  of one byte, then bulk data for a window; the receiver times the bytes that arrived
  (``result``), so socket buffers and queues on the way do not flatter the sender.
* ``allreduce`` -- torch.distributed (gloo or nccl) in a child process, timed.

The agent exits when the command connection closes, and after ``life`` seconds whatever
happens (an alarm), also if the checker never connects.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

UNIT_GEMM = 128            # n of the n x n float64 GEMM: 2 n^3 flops per unit
UNIT_LOOP = 10000          # iterations of the pure-Python unit
MEM_BYTES = 16 << 20
CHUNK = 256 << 10

# Annotations are strings, their names the checker's only: on the host, this source imports
# nothing it does not use (typing's own TYPE_CHECKING would cost every agent an import).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Dict, Optional, Tuple

    Json = Dict[str, Any]   # a command line as json reads it, an answer as it writes it

if "cpu_limit" not in globals():   # sent as agentfacts' source + this one; imported in tests
    from mpilaunch.check.agentfacts import boot_id, cpu_limit, devices, ifname


def _work(kind: str, window: float, np: "Optional[ModuleType]") -> "Tuple[int, float, float]":
    """Repeat one unit until the window is over: (units, seconds, CPU seconds)."""
    if kind == "gemm" and np is not None:   # compute asks for "gemm" only with numpy
        a = np.full((UNIT_GEMM, UNIT_GEMM), 1.0001)
        unit = a.__matmul__
        arg = a
    else:
        def unit(n: int) -> int:
            x = 0
            for i in range(n):
                x += i * i
            return x
        arg = UNIT_LOOP
    unit(arg)              # the first call pays for page faults and BLAS buffers
    c0, t0 = time.process_time(), time.monotonic()
    end = t0 + window
    n = 0
    while True:
        unit(arg)
        n += 1
        t = time.monotonic()
        if t >= end:
            return n, t - t0, time.process_time() - c0


def compute(cmd: "Json", np: "Optional[ModuleType]") -> "Json":
    """Per slot: units per second of wall time, what a rank there would get. (Per CPU
    second would be steadier on a busy machine, but a cgroup quota would not show: a
    throttled process waits as a process waiting for a busy CPU does, /proc/self/schedstat
    counts both as run delay, and other processes fill the CPU it leaves.)"""
    kind = "gemm" if np is not None else "loop"
    kids = []
    for _ in range(max(1, int(cmd["slots"]))):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # only computes and writes: safe after fork in a threaded process
            try:
                os.close(r)
                os.write(w, json.dumps(_work(kind, cmd["window"], np)).encode())
            finally:
                os._exit(0)
        os.close(w)
        kids.append((pid, r))
    got = []
    for pid, r in kids:
        with os.fdopen(r, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        got.append(json.loads(data.decode()))
    scale = 2 * UNIT_GEMM ** 3 / 1e9 if kind == "gemm" else UNIT_LOOP / 1e6
    return {"kind": kind, "rates": [n / t * scale for n, t, _ in got],
            "cpu": [c / t for _, t, c in got]}


_BUFFERS: "list[bytearray]" = []


def memory(cmd: "Json") -> "Json":
    """Copy speed per second of this thread's CPU time: another process's turn on the CPU
    is the compute probe's business, not the memory's. The buffers are made once."""
    if not _BUFFERS:
        _BUFFERS.extend([bytearray(b"\1") * MEM_BYTES, bytearray(MEM_BYTES)])
        _BUFFERS[1][:] = _BUFFERS[0]         # the first copy pays for the pages
    src, dst = _BUFFERS
    c0, t0 = time.thread_time(), time.monotonic()
    end = t0 + cmd["window"]
    n = 0
    while True:
        dst[:] = src
        n += 1
        if time.monotonic() >= end:
            return {"rate": n * MEM_BYTES / max(time.thread_time() - c0, 1e-6)}


def disk(cmd: "Json") -> "Json":
    where = os.path.abspath(cmd["dir"])
    while not os.path.isdir(where) and where != os.path.dirname(where):
        where = os.path.dirname(where)
    st = os.statvfs(where)
    res = {"where": where, "free": st.f_bavail * st.f_frsize}
    block = b"\0" * (1 << 20)
    try:
        import tempfile
        fd, path = tempfile.mkstemp(prefix=".mpilaunch-deep-", dir=where)
    except OSError as exc:
        res["error"] = "cannot create a file in %s: %s" % (where, exc.strerror)
        return res
    try:
        t0 = time.monotonic()
        end = t0 + cmd["window"]
        done = 0
        while done < cmd["bytes"]:
            done += os.write(fd, block)
            if time.monotonic() >= end:
                break
        os.fsync(fd)
        res["rate"] = done / max(time.monotonic() - t0, 1e-6)
    except OSError as exc:
        res["error"] = "writing %s failed: %s" % (where, exc.strerror)
    finally:
        os.close(fd)
        os.unlink(path)
    return res


class Receiver:
    """Test connections: echoes the round trips, then counts bulk bytes for the window the
    sender names, and keeps (bytes, first-to-last-byte seconds) by transfer id."""

    def __init__(self) -> None:
        self.done: "Dict[object, Json]" = {}
        self.cond = threading.Condition()

    def serve(self, conn: socket.socket, h: "Json") -> None:
        rec: dict[str, object] = {"bytes": 0, "seconds": 0.0}
        tid = h.get("id")
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(h["pings"]):
                conn.sendall(conn.recv(1))
            buf = bytearray(CHUNK)
            if conn.recv_into(buf):     # the first bytes start the clock
                first = last = time.monotonic()
                end, got = first + h["window"], 0
                while last < end:
                    n = conn.recv_into(buf)
                    if not n:
                        break
                    last = time.monotonic()
                    got += n            # bytes after the first read, over first->last
                rec["bytes"] = got
                if last > first:
                    rec["seconds"] = last - first
        except (OSError, ValueError, KeyError) as exc:
            rec["error"] = str(exc)
        finally:
            conn.close()
            if tid is not None:
                with self.cond:
                    self.done[tid] = rec
                    self.cond.notify_all()

    def result(self, tid: object, timeout: float) -> "Json":
        with self.cond:
            self.cond.wait_for(lambda: tid in self.done, timeout)
            return self.done.pop(tid, {"error": "no transfer %s arrived" % tid})


def send(cmd: "Json") -> "Json":
    s = socket.socket(socket.AF_INET6 if ":" in cmd["addr"] else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(cmd["timeout"])
    res: "Json" = {}
    try:
        s.connect((cmd["addr"], cmd["port"]))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        res["iface"] = ifname(s.getsockname()[0])
        s.sendall(json.dumps({"t": cmd["t"], "id": cmd["id"], "pings": cmd["pings"],
                              "window": cmd["window"]}).encode() + b"\n")
        rtts = []
        for _ in range(cmd["pings"]):
            t = time.monotonic()
            s.sendall(b"p")
            if not s.recv(1):
                raise OSError("the receiver closed the connection")
            rtts.append(time.monotonic() - t)
        res["rtt"] = sorted(rtts)[len(rtts) // 2]
        block = b"\0" * CHUNK
        end = time.monotonic() + cmd["window"] + 0.05
        sent = 0
        while sent < cmd["bytes"] and time.monotonic() < end:
            sent += s.send(block)
        res["sent"] = sent
    except socket.timeout:
        res.setdefault("error", "timed out after %gs" % cmd["timeout"])
    except OSError as exc:
        if "rtt" not in res:   # after the round trips, the receiver ending its window is normal
            res["error"] = exc.strerror or str(exc)
    finally:
        s.close()
    return res


def allreduce(cmd: "Json") -> "Json":
    """The checker's torch.distributed program (``code``: torch's import stays out of the
    agent) in a child, with the ranks' GLOO_SOCKET_IFNAME: its last line."""
    env = dict(os.environ)
    route = socket.socket(socket.AF_INET6 if ":" in cmd["master"] else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        route.connect((cmd["master"], 9))
        iface = ifname(route.getsockname()[0])
    finally:
        route.close()
    if iface and "GLOO_SOCKET_IFNAME" not in env:   # as the ranks get it (rank/plan.py)
        env["GLOO_SOCKET_IFNAME"] = iface
    try:
        p = subprocess.run([sys.executable, "-c", cmd["code"], json.dumps(cmd)], env=env,
                           capture_output=True, text=True, timeout=cmd["timeout"])
    except subprocess.TimeoutExpired:
        return {"error": "did not finish within %gs" % cmd["timeout"]}
    if p.returncode != 0:
        tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
        return {"error": "exit %d: %s" % (p.returncode, tail[0][:300])}
    return {"times": json.loads(p.stdout.strip().splitlines()[-1])}


def spare_port(_cmd: "Json") -> "Json":
    """A port free there now, for the allreduce's rendezvous (the agent cannot import
    mpilaunch.net: it runs from its source alone)."""
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::", 0))
    except OSError:
        s = socket.socket()
        s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    return {"port": port}


def _line(conn: socket.socket) -> "Optional[Json]":
    head = b""
    while not head.endswith(b"\n"):
        c = conn.recv(1)
        if not c or len(head) > 4096:
            return None
        head += c
    return json.loads(head.decode())


def serve(ask: "Json", listener: socket.socket) -> None:
    """The agent, in the probe's child: the listener is bound already (its port went out in
    the probe's answer)."""
    signal.signal(signal.SIGALRM, lambda *a: os._exit(3))
    signal.alarm(max(1, int(ask["life"])))
    np: list = []   # numpy, once prepare has imported it

    def prepare(cmd: "Json") -> "Json":
        """The checker says whether to use numpy (it knows which hosts share a machine)."""
        if cmd.get("gemm") and not np:
            for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ[name] = "1"     # one thread per slot: the slots are the parallelism
            try:
                import numpy
                np.append(numpy)
            except ImportError:
                pass
        return {"numpy": np[0].__version__ if np else None}

    rx = Receiver()
    ops = {"prepare": prepare, "compute": lambda c: compute(c, np[0] if np else None),
           "memory": memory, "disk": disk,
           "send": lambda c: send(dict(c, t=ask["token"])),
           "result": lambda c: rx.result(c["id"], c["timeout"]), "allreduce": allreduce,
           "spare_port": spare_port}

    def command(conn: socket.socket) -> None:
        f = conn.makefile("rw", encoding="utf-8")
        hello = {"op": "hello", "hostname": socket.gethostname(), "boot_id": boot_id(),
                 "ncpu": len(os.sched_getaffinity(0)), "cpu_limit": cpu_limit(),
                 "devices": devices()}
        if ask.get("torch"):
            import importlib.util
            hello["torch"] = importlib.util.find_spec("torch") is not None
        f.write(json.dumps(hello) + "\n")
        f.flush()
        for line in f:
            cmd = json.loads(line)
            if cmd["op"] == "exit":
                break
            try:
                res = ops[cmd["op"]](cmd)
            except Exception as exc:  # noqa: BLE001 - one answer per command, whatever happened
                res = {"error": "%s: %s" % (type(exc).__name__, exc)}
            res["op"] = cmd["op"]
            f.write(json.dumps(res) + "\n")
            f.flush()
        os._exit(0)

    while True:
        conn, _ = listener.accept()
        try:
            conn.settimeout(30)
            h = _line(conn)
        except (OSError, ValueError):
            h = None
        if not isinstance(h, dict) or h.get("t") != ask["token"]:
            conn.close()
        elif h.get("cmd"):
            conn.settimeout(None)
            threading.Thread(target=command, args=(conn,), daemon=True).start()
        else:
            threading.Thread(target=rx.serve, args=(conn, h), daemon=True).start()
