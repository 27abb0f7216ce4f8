#!/usr/bin/env python3
"""Real multi-node test hosts on one machine: network namespaces with their own sshd.

    testhosts.py up N [--prefix mlt] [--block B] [--owner-pid PID] [--no-verify]
    testhosts.py down [--prefix mlt] [--force]
    testhosts.py status [--prefix mlt]
    testhosts.py kill-sshd|crash|start-sshd|link-down|link-up I [--prefix mlt]

``up`` creates, in the root network namespace, a bridge ``<prefix>br0`` and for every
host i (1..N):

* a network namespace ``<prefix>i`` with ``lo`` up and ``eth0`` (a veth onto the bridge)
  at ``10.231.0.(base+10+i)``;
* an ``sshd`` inside it, in its own UTS namespace (hostname ``<prefix>-hosti``) and its
  own mount namespace with a private tmpfs on ``/run`` (so each has its own
  ``/run/sshd``), listening on ``10.231.0.(base+10+i):2222``, key-only root login.

All addresses are inside 10.231.0.0/24.  That /24 is split into eight /27 blocks so that
several prefixes can be up at once without overlapping routes; block 0 (the default for
the first set) gives the bridge 10.231.0.1 and hosts 10.231.0.11, .12, ...  Block b gives
10.231.0.(32b+1) and 10.231.0.(32b+10+i).  The namespaces get no default route, so
nothing inside can reach any other address.

The state dir ``/tmp/mpilaunch-testhosts/<prefix>/`` (0700) holds a dedicated client key,
an ``ssh_config`` (use ``ssh -F <state>/ssh_config <addr>``), per-host sshd configs and
logs, ``state.json`` (every resource, written before/as it is created, so ``down`` can
undo a half-failed ``up``) and ``hosts.json`` (the description for callers).  The client
key's public half is appended to /root/.ssh/authorized_keys (restricted with
``from="10.231.0.0/24"`` and a marker comment); ``down`` removes exactly that line.

``down`` kills exactly the processes it started (the recorded sshd PIDs, checked against
their start time, plus their descendants, plus anything left inside the namespaces it
created), deletes the namespaces, veths, bridge, the authorized_keys line and the state
dir.  It is idempotent.

Standard library only; every command is an argv list (no shell).
"""
import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

BASE_DIR = "/tmp/mpilaunch-testhosts"
LOCK_PATH = os.path.join(BASE_DIR, ".lock")
SUBNET = "10.231.0"          # the one /24 this tool ever uses
SUBNET_CIDR = SUBNET + ".0/24"
BLOCK_SIZE = 32              # /27 blocks
N_BLOCKS = 8
MAX_HOSTS = 20               # base+11 .. base+30 inside a /27
SSH_PORT = 2222
SSHD = "/usr/sbin/sshd"
MARKER = "mpilaunch-testhosts"
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,6}[a-z]$")
AUTH_KEYS = "/root/.ssh/authorized_keys"
CREATED_SSH_DIR_MARKER = os.path.join(BASE_DIR, ".created-root-ssh-dir")


class TestHostsError(RuntimeError):
    """Bringing the hosts up failed (the message says why)."""


class PrefixInUse(TestHostsError):
    """A live set (CLI-made, or owned by a live process) already has this prefix."""


# Popen objects of the sshds this process started (kept so they can be reaped and do
# not trigger "subprocess is still running" ResourceWarnings when garbage-collected).
_CHILDREN = {}


# --------------------------------------------------------------------------- helpers

def _run(argv, check=True, timeout=30, **kw):
    """Run argv (a list); return CompletedProcess with text stdout/stderr."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise TestHostsError("%s failed (exit %d): %s" % (
            " ".join(argv), proc.returncode, proc.stderr.strip() or proc.stdout.strip()))
    return proc


def _quiet(argv):
    """Best-effort command for teardown: never raises, returns the exit code."""
    try:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=30).returncode
    except (OSError, subprocess.SubprocessError):
        return -1


def check_prefix(prefix):
    if not PREFIX_RE.match(prefix or ""):
        raise TestHostsError(
            "bad prefix %r: 2-8 chars, [a-z][a-z0-9]*, ending in a letter (so that "
            "'<prefix><i>' names are unambiguous)" % (prefix,))


def state_dir(prefix):
    return os.path.join(BASE_DIR, prefix)


def block_base(block):
    return BLOCK_SIZE * block


def bridge_addr(block):
    return "%s.%d" % (SUBNET, block_base(block) + 1)


def host_addr(block, i):
    return "%s.%d" % (SUBNET, block_base(block) + 10 + i)


def netns_name(prefix, i):
    return "%s%d" % (prefix, i)


def host_name(prefix, i):
    return "%s-host%d" % (prefix, i)


def bridge_name(prefix):
    return "%sbr0" % prefix


def veth_root(prefix, i):
    return "%s%db" % (prefix, i)     # root-namespace end; the other end is eth0 inside


def _ensure_base_dir():
    os.makedirs(BASE_DIR, mode=0o700, exist_ok=True)
    os.chmod(BASE_DIR, 0o700)


@contextlib.contextmanager
def _lock():
    """Serialise up/down across processes (block allocation, authorized_keys edits)."""
    _ensure_base_dir()
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _proc_starttime(pid):
    """Start time (clock ticks since boot) of pid, or None if it does not exist."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    # comm may contain spaces/parens: split after the last ')'
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[19])


def _proc_ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rindex(")") + 2:].split()[1])


def _descendants(pids):
    """All live descendants of the given pids (via /proc ppid links)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            ppid = _proc_ppid(int(name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(name))
    out, todo = [], list(pids)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def _alive(pid, starttime=None):
    st = _proc_starttime(pid)
    if st is None:
        return False
    if starttime is not None and st != starttime:
        return False   # pid reused by an unrelated process
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _kill_all(pids, grace=2.0):
    """SIGTERM the pids, wait up to `grace` seconds, then SIGKILL the survivors."""
    pids = [p for p in pids if p and p > 1 and p != os.getpid()]
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pids)
        if not any(_alive(p) for p in pids):
            return
        time.sleep(0.02)
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        _reap(pids)
        time.sleep(0.02)


def _reap(pids):
    """Collect zombies that are our own children (sshd started by this process)."""
    for p in pids:
        proc = _CHILDREN.get(p)
        if proc is not None:
            if proc.poll() is not None:
                del _CHILDREN[p]
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p, os.WNOHANG)


def _netns_list():
    proc = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def _link_exists(name):
    return os.path.exists("/sys/class/net/%s" % name)


def _netns_pids(ns):
    proc = _run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in proc.stdout.split() if x.isdigit()]


def _used_blocks(exclude_prefix=None):
    """Blocks in use: by other state dirs, or by any address on a root-ns interface."""
    used = set()
    if os.path.isdir(BASE_DIR):
        for name in os.listdir(BASE_DIR):
            if name == exclude_prefix:
                continue
            st = _read_json(os.path.join(BASE_DIR, name, "state.json"))
            if st and isinstance(st.get("block"), int):
                used.add(st["block"])
    proc = _run(["ip", "-4", "-o", "addr", "show"], check=False)
    for m in re.finditer(r"inet (\d+\.\d+\.\d+)\.(\d+)/", proc.stdout):
        if m.group(1) == SUBNET:
            used.add(int(m.group(2)) // BLOCK_SIZE)
    return used


# --------------------------------------------------------------------------- prereqs

def missing_prereqs():
    """Return a human reason why hosts cannot be brought up here, or None."""
    if os.geteuid() != 0:
        return "testhosts need root (euid is %d)" % os.geteuid()
    for tool in ("ip", "unshare", "nsenter", "mount", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return "%s not found on PATH" % tool
    if not os.access(SSHD, os.X_OK):
        return "%s missing (apt-get install -y openssh-server)" % SSHD
    proc = _run(["ip", "netns", "list"], check=False)
    if proc.returncode != 0:
        return "ip netns unavailable: %s" % proc.stderr.strip()
    return None


def _probe_netns(prefix):
    """Create and delete a throwaway namespace: does `ip netns add` work here?"""
    probe = "%sprobe" % prefix
    proc = _run(["ip", "netns", "add", probe], check=False)
    _quiet(["ip", "netns", "del", probe])
    if proc.returncode != 0:
        return "ip netns add does not work here: %s" % proc.stderr.strip()
    return None


# --------------------------------------------------------------------------- up

def _sshd_config(prefix, i, block, sd):
    addr = host_addr(block, i)
    return "\n".join([
        "# sshd for test host %s (%s) -- written by scripts/testhosts.py" % (
            host_name(prefix, i), addr),
        "ListenAddress %s:%d" % (addr, SSH_PORT),
        "AddressFamily inet",
        "HostKey %s" % os.path.join(sd, "ssh_host_ed25519_key"),
        "PidFile %s" % os.path.join(sd, "sshd-%d.pid" % i),
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "AuthorizedKeysFile .ssh/authorized_keys",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "X11Forwarding no",
        "AllowAgentForwarding no",
        "PrintMotd no",
        "PrintLastLog no",
        "MaxStartups 64:30:128",
        "MaxSessions 64",
        "LogLevel INFO",
        "",
    ])


def _ssh_config(prefix, block, n, key):
    lines = ["# ssh client config for test hosts '%s' -- use: ssh -F <this file> <addr>"
             % prefix]
    for i in range(1, n + 1):
        lines.append("Host %s %s" % (host_addr(block, i), host_name(prefix, i)))
        lines.append("    HostName %s" % host_addr(block, i))
    lines.append("Host %s.* %s-host*" % (SUBNET, prefix))
    lines += [
        "    Port %d" % SSH_PORT,
        "    User root",
        "    IdentityFile %s" % key,
        "    IdentitiesOnly yes",
        "    StrictHostKeyChecking no",
        "    UserKnownHostsFile /dev/null",
        "    GlobalKnownHostsFile /dev/null",
        "    CheckHostIP no",
        "    BatchMode yes",
        "    LogLevel ERROR",
        "    ConnectTimeout 5",
        "    ServerAliveInterval 5",
        "    ServerAliveCountMax 2",
        "    ForwardAgent no",
        "    ForwardX11 no",
        "    ControlMaster no",
        "    ControlPath none",
        "    AddressFamily inet",
        "",
    ]
    return "\n".join(lines)


def _add_auth_line(line):
    """Append line to /root/.ssh/authorized_keys unless present.  If /root/.ssh did not
    exist, remember that (a marker in BASE_DIR) so the last `down` can remove it again."""
    ssh_dir = os.path.dirname(AUTH_KEYS)
    if not os.path.isdir(ssh_dir):
        os.makedirs(ssh_dir, mode=0o700)
        with open(CREATED_SSH_DIR_MARKER, "w") as f:
            f.write(ssh_dir + "\n")
    existing = ""
    with contextlib.suppress(FileNotFoundError):
        with open(AUTH_KEYS) as f:
            existing = f.read()
    if line not in existing.splitlines():
        fd = os.open(AUTH_KEYS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            if existing and not existing.endswith("\n"):
                f.write("\n")
            f.write(line + "\n")


def _cleanup_created_ssh_dir():
    """If we created /root/.ssh and nothing but our (now removed) lines was ever put
    there, remove it again."""
    if not os.path.exists(CREATED_SSH_DIR_MARKER):
        return
    ssh_dir = os.path.dirname(AUTH_KEYS)
    try:
        if os.path.getsize(AUTH_KEYS) != 0:
            return                      # someone's lines are still there
        os.unlink(AUTH_KEYS)
    except FileNotFoundError:
        pass
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.rmdir(ssh_dir)               # only if now empty
    if not os.path.isdir(ssh_dir):
        with contextlib.suppress(OSError):
            os.unlink(CREATED_SSH_DIR_MARKER)


def _remove_auth_lines(prefix, exact_line=None):
    """Remove our line(s) for this prefix from authorized_keys (exact line if known)."""
    try:
        with open(AUTH_KEYS) as f:
            lines = f.read().splitlines(True)
    except FileNotFoundError:
        return
    tag = "%s:%s:" % (MARKER, prefix)

    def ours(ln):
        s = ln.rstrip("\n")
        if exact_line is not None:
            return s == exact_line
        words = s.split()
        return bool(words) and words[-1].startswith(tag)

    keep = [ln for ln in lines if not ours(ln)]
    if len(keep) == len(lines):
        return
    st = os.stat(AUTH_KEYS)
    tmp = AUTH_KEYS + ".mpilaunch-tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, st.st_mode & 0o777)
    with os.fdopen(fd, "w") as f:
        f.writelines(keep)
    os.replace(tmp, AUTH_KEYS)


def _spawn_sshd(prefix, i, sd, hostname):
    """Start sshd -D inside netns <prefix>i with its own UTS + mount ns. Returns Popen."""
    cfg = os.path.join(sd, "sshd-%d.conf" % i)
    log = os.path.join(sd, "sshd-%d.log" % i)
    argv = ["ip", "netns", "exec", netns_name(prefix, i),
            "unshare", "--uts", "--mount", "--propagation", "private",
            sys.executable, os.path.abspath(__file__), "_nsinit",
            "--hostname", hostname, "--",
            SSHD, "-D", "-f", cfg, "-E", log]
    out = open(os.path.join(sd, "sshd-%d.stderr" % i), "ab")
    try:
        # No fork between here and sshd (ip netns exec, unshare and _nsinit all exec),
        # so Popen.pid is sshd's pid.  Own session: a ^C at the terminal is not its.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, close_fds=True)
        _CHILDREN[proc.pid] = proc
        return proc
    finally:
        out.close()


def _wait_listening(addr, port, proc, log, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TestHostsError("sshd for %s exited with %s; log %s:\n%s" % (
                addr, proc.returncode, log, _tail(log)))
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise TestHostsError("sshd on %s:%d not listening after %.0fs; log:\n%s" % (
        addr, port, timeout, _tail(log)))


def _tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def _owner_alive(st):
    pid = st.get("owner_pid")
    if not pid:
        return True   # CLI-made sets have no owner: in use until `down`
    return _alive(pid, st.get("owner_starttime"))


def prefix_in_use(prefix):
    """True if a live set with this prefix exists (state dir with a live owner)."""
    st = _read_json(os.path.join(state_dir(prefix), "state.json"))
    if st is None:
        return os.path.isdir(state_dir(prefix)) or netns_name(prefix, 1) in _netns_list()
    return _owner_alive(st)


def up(n, prefix="mlt", block=None, owner_pid=None, verify=True, quiet=True):
    """Bring up n hosts; return the hosts.json dict.  On any failure, tears down."""
    check_prefix(prefix)
    if not 1 <= n <= MAX_HOSTS:
        raise TestHostsError("N must be 1..%d" % MAX_HOSTS)
    why = missing_prereqs()
    if why:
        raise TestHostsError(why)
    sd = state_dir(prefix)
    with _lock():
        old = _read_json(os.path.join(sd, "state.json"))
        if old is not None and _owner_alive(old):
            raise PrefixInUse(
                "prefix %r already up (state %s); run `testhosts.py down --prefix %s`"
                % (prefix, sd, prefix))
        # stale (owner died) or leftovers from a crash: clean them first
        _down_locked(prefix)
        why = _probe_netns(prefix)
        if why:
            raise TestHostsError(why)
        used = _used_blocks(exclude_prefix=prefix)
        if block is None:
            free = [b for b in range(N_BLOCKS) if b not in used]
            if not free:
                raise TestHostsError("all %d address blocks of %s are in use"
                                     % (N_BLOCKS, SUBNET_CIDR))
            block = free[0]
        elif block in used or not 0 <= block < N_BLOCKS:
            raise TestHostsError("address block %r is in use or out of range" % block)
        os.makedirs(sd, mode=0o700)
        os.chmod(sd, 0o700)
        st = {
            "v": 1, "prefix": prefix, "block": block, "n": n, "state_dir": sd,
            "bridge": None, "netns": [], "veths": [], "pids": [],
            "auth_line": None,
            "owner_pid": owner_pid,
            "owner_starttime": _proc_starttime(owner_pid) if owner_pid else None,
        }
        state_path = os.path.join(sd, "state.json")
        _write_json(state_path, st)
        try:
            desc = _up_locked(st, state_path, verify)
        except BaseException:
            _down_locked(prefix)
            raise
    if not quiet:
        print(json.dumps(desc, indent=2, sort_keys=True))
    return desc


def _up_locked(st, state_path, verify):
    prefix, block, n, sd = st["prefix"], st["block"], st["n"], st["state_dir"]
    save = lambda: _write_json(state_path, st)  # noqa: E731

    # keys: a client key (authorized for root) and one host key shared by the sshds
    key = os.path.join(sd, "id_ed25519")
    nonce = "%x" % int(time.time() * 1000)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
          "%s:%s:%s" % (MARKER, prefix, nonce), "-f", key])
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "%s-hostkey" % prefix,
          "-f", os.path.join(sd, "ssh_host_ed25519_key")])
    with open(key + ".pub") as f:
        pub = f.read().split()
    auth_line = 'from="%s" %s %s %s:%s:%s' % (SUBNET_CIDR, pub[0], pub[1],
                                              MARKER, prefix, nonce)
    st["auth_line"] = auth_line
    save()
    _add_auth_line(auth_line)

    # bridge
    br = bridge_name(prefix)
    st["bridge"] = br
    save()
    _run(["ip", "link", "add", "name", br, "type", "bridge"])
    _quiet(["ip", "link", "set", "dev", br, "addrgenmode", "none"])  # no IPv6 chatter
    _run(["ip", "addr", "add", "%s/27" % bridge_addr(block), "dev", br])
    _run(["ip", "link", "set", "dev", br, "up"])

    for i in range(1, n + 1):
        ns, vr = netns_name(prefix, i), veth_root(prefix, i)
        st["netns"].append(ns)
        save()
        _run(["ip", "netns", "add", ns])
        st["veths"].append(vr)
        save()
        _run(["ip", "link", "add", "name", vr, "type", "veth",
              "peer", "name", "eth0", "netns", ns])
        _quiet(["ip", "link", "set", "dev", vr, "addrgenmode", "none"])
        _run(["ip", "link", "set", "dev", vr, "master", br])
        _run(["ip", "link", "set", "dev", vr, "up"])
        _quiet(["ip", "-n", ns, "link", "set", "dev", "eth0", "addrgenmode", "none"])
        _run(["ip", "-n", ns, "addr", "add", "%s/27" % host_addr(block, i), "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "dev", "eth0", "up"])
        _run(["ip", "-n", ns, "link", "set", "dev", "lo", "up"])

    with open(os.path.join(sd, "ssh_config"), "w") as f:
        f.write(_ssh_config(prefix, block, n, key))

    procs = []
    for i in range(1, n + 1):
        with open(os.path.join(sd, "sshd-%d.conf" % i), "w") as f:
            f.write(_sshd_config(prefix, i, block, sd))
        proc = _spawn_sshd(prefix, i, sd, host_name(prefix, i))
        procs.append(proc)
        st["pids"].append({"pid": proc.pid, "host": i, "netns": netns_name(prefix, i),
                           "starttime": _proc_starttime(proc.pid)})
        save()
    for i, proc in enumerate(procs, 1):
        _wait_listening(host_addr(block, i), SSH_PORT, proc,
                        os.path.join(sd, "sshd-%d.log" % i))
        # the pid is sshd itself once it listens: record its exec'd start time (same)
        st["pids"][i - 1]["starttime"] = _proc_starttime(proc.pid)
    save()

    desc = {
        "prefix": prefix,
        "block": block,
        "subnet": SUBNET_CIDR,
        "bridge": {"name": br, "addr": bridge_addr(block)},
        "port": SSH_PORT,
        "state_dir": sd,
        "ssh_config": os.path.join(sd, "ssh_config"),
        "key": key,
        "hosts": [{
            "index": i,
            "addr": host_addr(block, i),
            "hostname": host_name(prefix, i),
            "netns": netns_name(prefix, i),
            "veth": veth_root(prefix, i),
            "sshd_pid": procs[i - 1].pid,
            "sshd_config": os.path.join(sd, "sshd-%d.conf" % i),
            "sshd_log": os.path.join(sd, "sshd-%d.log" % i),
        } for i in range(1, n + 1)],
    }
    if verify:
        _verify_ssh(desc)
    _write_json(os.path.join(sd, "hosts.json"), desc)
    return desc


def _verify_ssh(desc):
    """ssh into every host (in parallel) and check its hostname."""
    errors = []

    def one(h):
        try:
            p = _run(["ssh", "-F", desc["ssh_config"], h["addr"], "hostname"],
                     check=False, timeout=20)
        except subprocess.TimeoutExpired:
            errors.append("%s: ssh timed out" % h["addr"])
            return
        got = p.stdout.strip()
        if p.returncode != 0 or got != h["hostname"]:
            errors.append("%s: ssh exit %d, hostname %r (want %r): %s; sshd log:\n%s" % (
                h["addr"], p.returncode, got, h["hostname"], p.stderr.strip(),
                _tail(h["sshd_log"])))

    threads = [threading.Thread(target=one, args=(h,)) for h in desc["hosts"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise TestHostsError("ssh check failed:\n" + "\n".join(errors))


# --------------------------------------------------------------------------- down

def down(prefix="mlt", force=False):
    """Tear down everything for this prefix.  Idempotent; never raises for 'absent'.
    Refuses (unless force) a set owned by another live process, e.g. a running pytest
    session: its owner tears it down itself."""
    check_prefix(prefix)
    with _lock():
        st = _read_json(os.path.join(state_dir(prefix), "state.json")) or {}
        owner = st.get("owner_pid")
        if (not force and owner and owner != os.getpid()
                and _alive(owner, st.get("owner_starttime"))):
            raise TestHostsError(
                "set %r belongs to live process %d (a test session?); it tears the set "
                "down itself. Use --force to remove it anyway." % (prefix, owner))
        _down_locked(prefix)


def _down_locked(prefix):
    sd = state_dir(prefix)
    st = _read_json(os.path.join(sd, "state.json")) or {}
    n_guess = max(int(st.get("n") or 0), 0)
    # namespaces: those recorded, plus any '<prefix><digits>' left by a lost state file
    pattern = re.compile(r"^%s\d+$" % re.escape(prefix))
    namespaces = list(st.get("netns") or [])
    for ns in _netns_list():
        if pattern.match(ns) and ns not in namespaces:
            namespaces.append(ns)

    # 1. processes: the recorded sshd pids (if still the same process) + descendants
    roots = [rec["pid"] for rec in st.get("pids") or []
             if _alive(rec["pid"], rec.get("starttime"))]
    victims = roots + _descendants(roots)
    # anything still inside our namespaces was started there by us (via our sshd)
    for ns in namespaces:
        for pid in _netns_pids(ns):
            if pid not in victims:
                victims.append(pid)
    if victims:
        _kill_all(victims)
    _reap([rec["pid"] for rec in st.get("pids") or []])

    # 2. namespaces, veths, bridge
    for ns in namespaces:
        _quiet(["ip", "netns", "del", ns])
    veths = list(st.get("veths") or [])
    for i in range(1, max(n_guess, len(namespaces)) + 1):
        if veth_root(prefix, i) not in veths:
            veths.append(veth_root(prefix, i))
    for v in veths:
        if _link_exists(v):
            _quiet(["ip", "link", "del", "dev", v])
    br = st.get("bridge") or bridge_name(prefix)
    if _link_exists(br):
        _quiet(["ip", "link", "del", "dev", br])

    # 3. the authorized_keys line (exact recorded line, else by marker for this prefix)
    _remove_auth_lines(prefix, st.get("auth_line"))
    _remove_auth_lines(prefix)      # also lines of this prefix left by a lost state
    _cleanup_created_ssh_dir()

    # 4. the state dir
    shutil.rmtree(sd, ignore_errors=True)


# --------------------------------------------------------------------------- host loss

def _load(prefix):
    check_prefix(prefix)
    st = _read_json(os.path.join(state_dir(prefix), "state.json"))
    if st is None:
        raise TestHostsError("prefix %r is not up" % prefix)
    return st


def _sshd_rec(st, i):
    for rec in st.get("pids") or []:
        if rec["host"] == i:
            return rec
    raise TestHostsError("host %d not in set %r" % (i, st["prefix"]))


def _update_hosts_json(st, i, pid):
    path = os.path.join(st["state_dir"], "hosts.json")
    desc = _read_json(path)
    if desc:
        for h in desc["hosts"]:
            if h["index"] == i:
                h["sshd_pid"] = pid
        _write_json(path, desc)


def kill_sshd(prefix, i):
    """Kill host i's listening sshd only (sessions already open keep running, as when
    a real sshd dies).  New ssh connections to the host are then refused."""
    with _lock():
        st = _load(prefix)
        rec = _sshd_rec(st, i)
        if _alive(rec["pid"], rec.get("starttime")):
            _kill_all([rec["pid"]])
        _reap([rec["pid"]])


def crash(prefix, i):
    """Host i 'loses power': kill every process inside its namespace (sshd, sessions,
    daemons, ranks).  The address stays (connections are refused, not dropped)."""
    with _lock():
        st = _load(prefix)
        rec = _sshd_rec(st, i)
        roots = [rec["pid"]] if _alive(rec["pid"], rec.get("starttime")) else []
        victims = roots + _descendants(roots)
        victims += [p for p in _netns_pids(rec["netns"]) if p not in victims]
        _kill_all(victims, grace=0.0)
        _reap([rec["pid"]])


def start_sshd(prefix, i):
    """(Re)start host i's sshd if it is not running; returns its pid."""
    with _lock():
        st = _load(prefix)
        rec = _sshd_rec(st, i)
        if _alive(rec["pid"], rec.get("starttime")):
            return rec["pid"]
        sd = st["state_dir"]
        proc = _spawn_sshd(prefix, i, sd, host_name(prefix, i))
        rec.update(pid=proc.pid, starttime=_proc_starttime(proc.pid))
        _write_json(os.path.join(sd, "state.json"), st)
        _wait_listening(host_addr(st["block"], i), SSH_PORT, proc,
                        os.path.join(sd, "sshd-%d.log" % i))
        rec["starttime"] = _proc_starttime(proc.pid)
        _write_json(os.path.join(sd, "state.json"), st)
        _update_hosts_json(st, i, proc.pid)
        return proc.pid


def set_link(prefix, i, up_):
    """Take host i's link down (packets silently lost: connects hang, open TCP
    connections stall, as with a pulled cable) or bring it back up."""
    st = _load(prefix)
    _sshd_rec(st, i)
    _run(["ip", "link", "set", "dev", veth_root(prefix, i), "up" if up_ else "down"])


# --------------------------------------------------------------------------- status

def status(prefix=None):
    out = []
    names = [prefix] if prefix else sorted(
        d for d in (os.listdir(BASE_DIR) if os.path.isdir(BASE_DIR) else [])
        if os.path.isdir(os.path.join(BASE_DIR, d)))
    present = set(_netns_list())
    for p in names:
        st = _read_json(os.path.join(state_dir(p), "state.json"))
        desc = _read_json(os.path.join(state_dir(p), "hosts.json"))
        if st is None:
            out.append({"prefix": p, "state": "absent" if not os.path.isdir(state_dir(p))
                        else "broken (no state.json)"})
            continue
        hosts = []
        for rec in st.get("pids") or []:
            i = rec["host"]
            addr = host_addr(st["block"], i)
            listening = False
            with contextlib.suppress(OSError):
                with socket.create_connection((addr, SSH_PORT), timeout=0.3):
                    listening = True
            hosts.append({"index": i, "addr": addr, "hostname": host_name(p, i),
                          "netns": rec["netns"], "netns_present": rec["netns"] in present,
                          "sshd_pid": rec["pid"],
                          "sshd_alive": _alive(rec["pid"], rec.get("starttime")),
                          "listening": listening})
        out.append({"prefix": p, "state": "up" if desc else "partial",
                    "owner_pid": st.get("owner_pid"), "owner_alive": _owner_alive(st),
                    "block": st["block"], "ssh_config": os.path.join(state_dir(p),
                                                                     "ssh_config"),
                    "hosts": hosts})
    return out


# --------------------------------------------------------------------------- _nsinit

def _nsinit(hostname, argv):
    """Runs inside the new UTS+mount namespaces: hostname, private /run, exec sshd."""
    socket.sethostname(hostname)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=16m",
                    "mpilaunch-run", "/run"], check=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    os.chmod("/run/sshd", 0o755)
    os.execv(argv[0], argv)


# --------------------------------------------------------------------------- CLI

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="create N namespace hosts with sshd")
    p_up.add_argument("n", type=int)
    p_up.add_argument("--prefix", default="mlt")
    p_up.add_argument("--block", type=int, default=None,
                      help="/27 block of %s to use (default: first free)" % SUBNET_CIDR)
    p_up.add_argument("--owner-pid", type=int, default=None,
                      help="the set is stale (reclaimable) once this pid is gone")
    p_up.add_argument("--no-verify", action="store_true",
                      help="skip the ssh+hostname check of every host")
    p_down = sub.add_parser("down", help="remove everything `up` created")
    p_down.add_argument("--prefix", default="mlt")
    p_down.add_argument("--force", action="store_true",
                        help="also remove a set whose owner process is alive")
    p_st = sub.add_parser("status", help="show sets, sshd liveness, ports")
    p_st.add_argument("--prefix", default=None)
    for name, hlp in (("kill-sshd", "kill host I's sshd (open sessions survive)"),
                      ("crash", "kill every process inside host I"),
                      ("start-sshd", "(re)start host I's sshd"),
                      ("link-down", "take host I's link down (packets lost)"),
                      ("link-up", "bring host I's link back")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("i", type=int, help="host index, 1-based")
        p.add_argument("--prefix", default="mlt")
    p_init = sub.add_parser("_nsinit", help="(internal) runs inside a new host: hostname, private /run, exec sshd")
    p_init.add_argument("--hostname", required=True)
    p_init.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)

    try:
        if args.cmd == "up":
            up(args.n, args.prefix, args.block, args.owner_pid,
               verify=not args.no_verify, quiet=False)
        elif args.cmd == "down":
            down(args.prefix, force=args.force)
        elif args.cmd == "status":
            print(json.dumps(status(args.prefix), indent=2, sort_keys=True))
        elif args.cmd == "kill-sshd":
            kill_sshd(args.prefix, args.i)
        elif args.cmd == "crash":
            crash(args.prefix, args.i)
        elif args.cmd == "start-sshd":
            print(start_sshd(args.prefix, args.i))
        elif args.cmd in ("link-down", "link-up"):
            set_link(args.prefix, args.i, args.cmd == "link-up")
        elif args.cmd == "_nsinit":
            rest = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            _nsinit(args.hostname, rest)
    except TestHostsError as e:
        print("testhosts: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
