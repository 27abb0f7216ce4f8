"""The peer protocol: worker-0 delivers one JSON message to another host's waiting
``mpilaunch job`` over the ssh the launch itself needs (no extra port).

``ssh host <python> -c PEER_CODE <socket> <message>``: the one-liner connects to the waiting
entrypoint's abstract unix socket (:class:`mpilaunch.job.waiter.Waiter`), relays the line and
prints the reply as :data:`contract.PEER_PREFIX` + JSON. Messages: ``hello`` (readiness) and
``done`` (the job's exit status), both carrying the job key.
"""
from __future__ import annotations

import json
import subprocess
from typing import NamedTuple, Optional

from mpilaunch import contract, net, ssh
from mpilaunch.job.spec import JobSpec

PEER_TIMEOUT = 10.0           # per host: resolve / connect / ssh log-in bound for hello and done

# Runs on a peer host (over ssh) with worker-0's interpreter path: relays one JSON line to the
# waiting entrypoint's abstract socket and prints its reply. Exit 3: nobody is listening.
PEER_CODE = f"P = {contract.PEER_PREFIX!r}\n" + r'''
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(10)
try:
    s.connect("\0" + sys.argv[1])
except OSError as e:
    sys.stdout.write(P + json.dumps({"ok": False, "error": "not-listening", "detail": str(e)}) + "\n")
    sys.exit(3)
s.sendall(sys.argv[2].encode() + b"\n"); data = b""
while not data.endswith(b"\n") and len(data) < 65536:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
sys.stdout.write(P + (data.decode("utf-8", "replace").strip() or "{}") + "\n")
'''


class PeerReply(NamedTuple):
    """What a peer call came to."""

    ok: bool                        # delivered and accepted
    reply: Optional[dict]           # the peer's JSON
    why: str                        # the failure, one line with the fix ("" when ok)
    addr: str = ""                  # the address used


def parse_reply(stdout: str) -> Optional[dict]:
    """The last :data:`contract.PEER_PREFIX` line's JSON, or None."""
    reply = None
    for line in (stdout or "").splitlines():
        if line.startswith(contract.PEER_PREFIX):
            try:
                reply = json.loads(line[len(contract.PEER_PREFIX):])
            except ValueError:
                reply = None
    return reply


def peer_call(spec: JobSpec, index: int, message: dict, python: str, timeout: float = PEER_TIMEOUT) -> PeerReply:
    """Deliver one JSON message to host ``index``'s waiting entrypoint (over ssh unless local)."""
    host = spec.hosts[index]
    port = spec.port(index)   # its own (VC_WORKER_HOSTS host@port), else SSHD_PORT/--ssh-port
    target = ssh.ssh_target(host, port, spec.ssh_extra, timeout=min(timeout, 5.0))
    addrs, why = net.resolve(target.hostname, timeout)
    if addrs is None:
        return PeerReply(False, None, f"does not resolve: {why}")
    addr = addrs[0]
    argv = [python, "-c", PEER_CODE, spec.socket_name(index), json.dumps(message, sort_keys=True)]
    # an entry with its own port is never "here" (config/sshconfig.py)
    own_port = index < len(spec.ports) and spec.ports[index] is not None
    if not own_port and (net.is_here(host, addrs) or net.is_here(target.hostname, addrs)):
        cmd = argv
    else:
        if target.error:
            return PeerReply(False, None, target.error, addr)
        err = ssh.tcp_probe(addr, target.port, timeout)
        if err is not None:
            return PeerReply(False, None, ssh.port_message(err, target.port, timeout), addr)
        cmd = ssh.ssh_argv(host, port, spec.ssh_extra, timeout, ssh.remote_command(argv))
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=2 * timeout)
    except FileNotFoundError as exc:
        return PeerReply(False, None, f"cannot run {cmd[0]}: {exc.strerror}", addr)
    except subprocess.TimeoutExpired:
        return PeerReply(False, None, f"no reply within {2 * timeout:g}s", addr)
    if proc.returncode == 255 and cmd[0] == "ssh":
        return PeerReply(False, None, ssh.classify_ssh_error(proc.stderr, target.port, timeout), addr)
    reply = parse_reply(proc.stdout)
    if reply is None:
        return PeerReply(False, None, f"{python} failed there (exit {proc.returncode}): "
                                      f"{ssh.last_line(proc.stderr) or 'no output'}", addr)
    if reply.get("error") == "not-listening":
        return PeerReply(False, reply, f"ssh works, but no `mpilaunch job` is waiting there yet "
                                       f"(VC_TASK_INDEX={index})", addr)
    if not reply.get("ok"):
        return PeerReply(False, reply, f"its entrypoint refused: {reply.get('error', reply)}", addr)
    return PeerReply(True, reply, "", addr)
