"""ssh: the keys, the sshd of every host (config, start, wait until it listens), the
client ssh_config, and our one line in /root/.ssh/authorized_keys."""
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time

from . import netns, proc
from .errors import TestHostsError
from .state import BASE_DIR

SSH_PORT = 2222
SSHD = "/usr/sbin/sshd"
MARKER = "mpilaunch-testhosts"
AUTH_KEYS = "/root/.ssh/authorized_keys"
CREATED_SSH_DIR_MARKER = os.path.join(BASE_DIR, ".created-root-ssh-dir")
NSINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nsinit.py")


def layout(st, i):
    """(netns, address, sshd port) of host i of the set whose state is ``st``: by default its
    own namespace, 10.231.x address and port 2222; ``ports`` gives each host its own port,
    ``shared`` puts every host's sshd into host 1's namespace (one address, a UTS and mount
    namespace each: containers sharing a machine), ``ipv6`` uses the set's fd00:231::/32 ULA."""
    ports = st.get("ports") or []
    port = ports[i - 1] if len(ports) >= i else SSH_PORT
    j = 1 if st.get("shared") else i
    addr = netns.host_addr6(st["block"], j) if st.get("ipv6") else netns.host_addr(st["block"], j)
    return netns.netns_name(st["prefix"], j), addr, port


def sshd_config(prefix, i, block, sd, st=None):
    st = st or {"prefix": prefix, "block": block}
    _, addr, port = layout(st, i)
    v6 = ":" in addr
    return "\n".join([
        "# sshd for test host %s (%s) -- written by tests/helpers/hosts (scripts/testhosts.py)" % (
            netns.host_name(prefix, i), addr),
        ("ListenAddress [%s]:%d" if v6 else "ListenAddress %s:%d") % (addr, port),
        "AddressFamily %s" % ("inet6" if v6 else "inet"),
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


def ssh_config(prefix, block, n, key, st=None):
    """Host blocks for every host (by name; by address too when each has its own); a set with
    ports of its own gives them per name only (one address may have several): ssh to an
    address then needs ``-p``, as a hostfile's ``port=`` gives it."""
    st = st or {"prefix": prefix, "block": block}
    own_ports = bool(st.get("ports"))
    lines = ["# ssh client config for test hosts '%s' -- use: ssh -F <this file> <addr>"
             % prefix]
    for i in range(1, n + 1):
        _, addr, port = layout(st, i)
        names = netns.host_name(prefix, i) if (own_ports or st.get("shared")) else (
            "%s %s" % (addr, netns.host_name(prefix, i)))
        lines.append("Host %s" % names)
        lines.append("    HostName %s" % addr)
        if own_ports:
            lines.append("    Port %d" % port)
    v6 = netns.host_glob6(block) if st.get("ipv6") else netns.host_glob(block)
    lines.append("Host %s %s-host*" % (v6, prefix))
    lines += ([] if own_ports else ["    Port %d" % SSH_PORT]) + [
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
        "    AddressFamily %s" % ("inet6" if st.get("ipv6") else "inet"),
        "",
    ]
    return "\n".join(lines)


def make_keys(prefix, sd, block=0, ipv6=False):
    """A client key (to be authorized for root) and one host key shared by the sshds.
    Returns (client key path, the authorized_keys line for it)."""
    key = os.path.join(sd, "id_ed25519")
    nonce = "%x" % int(time.time() * 1000)
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
              "%s:%s:%s" % (MARKER, prefix, nonce), "-f", key])
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "%s-hostkey" % prefix,
              "-f", os.path.join(sd, "ssh_host_ed25519_key")])
    with open(key + ".pub") as f:
        pub = f.read().split()
    cidr = netns.set_cidr(block) + ("," + netns.set_cidr6(block) if ipv6 else "")
    auth_line = 'from="%s" %s %s %s:%s:%s' % (cidr, pub[0], pub[1], MARKER, prefix, nonce)
    return key, auth_line


def add_auth_line(line):
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


def cleanup_created_ssh_dir():
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


def remove_auth_lines(prefix, exact_line=None):
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


def spawn_sshd(prefix, i, sd, hostname, ns=None):
    """Start sshd -D inside netns ``ns`` (<prefix>i) with its own UTS + mount ns. Returns Popen."""
    cfg = os.path.join(sd, "sshd-%d.conf" % i)
    log = os.path.join(sd, "sshd-%d.log" % i)
    argv = ["ip", "netns", "exec", ns or netns.netns_name(prefix, i),
            "unshare", "--uts", "--mount", "--propagation", "private",
            sys.executable, "-S", NSINIT, "--hostname", hostname, "--",
            SSHD, "-D", "-f", cfg, "-E", log]
    out = open(os.path.join(sd, "sshd-%d.stderr" % i), "ab")
    try:
        # No fork between here and sshd (ip netns exec, unshare and nsinit.py all exec),
        # so Popen.pid is sshd's pid.  Own session: a ^C at the terminal is not its.
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True, close_fds=True)
        proc.CHILDREN[p.pid] = p
        return p
    finally:
        out.close()


def listening(addr, port=SSH_PORT, timeout=0.3):
    """Does something accept TCP connections on addr:port?"""
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_listening(addr, port, p, log, timeout=10.0):
    """Wait until the sshd Popen p accepts connections on addr:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise TestHostsError("sshd for %s exited with %s; log %s:\n%s" % (
                addr, p.returncode, log, proc.tail(log)))
        if listening(addr, port, timeout=0.5):
            return
        time.sleep(0.02)
    raise TestHostsError("sshd on %s:%d not listening after %.0fs; log:\n%s" % (
        addr, port, timeout, proc.tail(log)))


def verify_ssh(desc):
    """ssh into every host (in parallel) and check its hostname."""
    errors = []

    def one(h):
        try:
            p = proc.run(["ssh", "-F", desc["ssh_config"], "-p", str(h["port"]), h["addr"],
                          "hostname"], check=False, timeout=20)
        except subprocess.TimeoutExpired:
            errors.append("%s: ssh timed out" % h["addr"])
            return
        got = p.stdout.strip()
        if p.returncode != 0 or got != h["hostname"]:
            errors.append("%s: ssh exit %d, hostname %r (want %r): %s; sshd log:\n%s" % (
                h["addr"], p.returncode, got, h["hostname"], p.stderr.strip(),
                proc.tail(h["sshd_log"])))

    threads = [threading.Thread(target=one, args=(h,)) for h in desc["hosts"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise TestHostsError("ssh check failed:\n" + "\n".join(errors))
