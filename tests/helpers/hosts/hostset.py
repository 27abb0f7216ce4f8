"""A set of hosts as a whole: bring it up, tear it down, report its status.

``up`` records every resource in state.json before/as it creates it, and on any failure
(also KeyboardInterrupt) tears down what exists; ``down`` kills exactly the processes
the set started (recorded sshd PIDs checked against their start time, their descendants,
anything left inside its namespaces), deletes namespaces, veths, bridge, the
authorized_keys line and the state dir.  It is idempotent."""
import json
import os
import re
import shutil

from . import netns, proc, scan, sshd, state
from .errors import PrefixInUse, TestHostsError


def missing_prereqs():
    """Return a human reason why hosts cannot be brought up here, or None."""
    if os.geteuid() != 0:
        return "testhosts need root (euid is %d)" % os.geteuid()
    for tool in ("ip", "unshare", "nsenter", "mount", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return "%s not found on PATH" % tool
    if not os.access(sshd.SSHD, os.X_OK):
        return "%s missing (apt-get install -y openssh-server)" % sshd.SSHD
    return netns.netns_unavailable()


def used_blocks(exclude_prefix=None):
    """Blocks in use: by other state dirs, or by any address on a root-ns interface."""
    used = set()
    if os.path.isdir(state.BASE_DIR):
        for name in os.listdir(state.BASE_DIR):
            if name == exclude_prefix:
                continue
            st = state.read_json(state.state_path(name))
            if st and isinstance(st.get("block"), int):
                used.add(st["block"])
    return used | netns.blocks_with_addresses()


def prefix_in_use(prefix):
    """True if a live set with this prefix exists (state dir with a live owner)."""
    st = state.read_json(state.state_path(prefix))
    if st is None:
        return (os.path.isdir(state.state_dir(prefix))
                or netns.netns_name(prefix, 1) in netns.netns_list())
    return state.owner_alive(st)


def up(n, prefix="mlt", block=None, owner_pid=None, verify=True, quiet=True, wide=None,
       ports=None, shared=False, ipv6=False):
    """Bring up n hosts; return the hosts.json dict.  On any failure, tears down.
    ``wide``: take a /24 of its own (blocks 8..23: the scale sets, up to 240 hosts) instead
    of a /27 of 10.231.0.0/24; default: wide when n does not fit a /27. ``ports``: each host's
    sshd port (default 2222 each); ``shared``: every host's sshd in host 1's namespace (one
    address; give distinct ports); ``ipv6``: IPv6-only hosts (sshd.layout)."""
    if ports is not None and len(ports) != n:
        raise TestHostsError("give one port per host")
    if shared and len(set(ports or ())) != n:
        raise TestHostsError("hosts sharing one address need a port each")
    state.check_prefix(prefix)
    if wide is None:
        wide = n > netns.MAX_HOSTS if block is None else netns.is_wide(block)
    limit = netns.MAX_WIDE_HOSTS if wide else netns.MAX_HOSTS
    if not 1 <= n <= limit:
        raise TestHostsError("N must be 1..%d%s" % (limit, "" if wide else " (more: --wide)"))
    why = missing_prereqs()
    if why:
        raise TestHostsError(why)
    sd = state.state_dir(prefix)
    with state.lock():
        old = state.read_json(state.state_path(prefix))
        if old is not None and state.owner_alive(old):
            raise PrefixInUse(
                "prefix %r already up (state %s); run `testhosts.py down --prefix %s`"
                % (prefix, sd, prefix))
        # stale (owner died) or leftovers from a crash: clean them first
        down_locked(prefix)
        why = netns.probe_netns(prefix)
        if why:
            raise TestHostsError(why)
        used = used_blocks(exclude_prefix=prefix)
        blocks = netns.WIDE_BLOCKS if wide else range(netns.N_BLOCKS)
        if block is None:
            free = [b for b in blocks if b not in used]
            if not free:
                raise TestHostsError("all %d %s address blocks of %s are in use" % (
                    len(blocks), "wide" if wide else "small", netns.RANGE_CIDR))
            block = free[0]
        elif block in used or block not in blocks:
            raise TestHostsError("address block %r is in use or out of range" % block)
        os.makedirs(sd, mode=0o700)
        os.chmod(sd, 0o700)
        st = {
            "v": 1, "prefix": prefix, "block": block, "n": n, "state_dir": sd,
            "bridge": None, "netns": [], "veths": [], "pids": [],
            "auth_line": None,
            "ports": list(ports) if ports else None, "shared": bool(shared), "ipv6": bool(ipv6),
            "owner_pid": owner_pid,
            "owner_starttime": proc.starttime(owner_pid) if owner_pid else None,
        }
        state.write_json(state.state_path(prefix), st)
        try:
            desc = _build(st, verify)
        except BaseException:
            down_locked(prefix)
            raise
    if not quiet:
        print(json.dumps(desc, indent=2, sort_keys=True))
    return desc


def _build(st, verify):
    """Create everything, saving st before each resource exists."""
    prefix, block, n, sd = st["prefix"], st["block"], st["n"], st["state_dir"]

    def save():
        state.write_json(state.state_path(prefix), st)

    key, auth_line = sshd.make_keys(prefix, sd, block, st.get("ipv6"))
    st["auth_line"] = auth_line
    save()
    sshd.add_auth_line(auth_line)

    br = netns.bridge_name(prefix)
    st["bridge"] = br
    save()
    netns.add_bridge(prefix, block, st.get("ipv6"))

    # recorded first: down() removes whichever of them the batches managed to create
    n_ns = 1 if st.get("shared") else n
    st["netns"] = [netns.netns_name(prefix, i) for i in range(1, n_ns + 1)]
    st["veths"] = [netns.veth_root(prefix, i) for i in range(1, n_ns + 1)]
    save()
    netns.add_host_links(prefix, 1, n_ns, block, st.get("ipv6"))

    with open(os.path.join(sd, "ssh_config"), "w") as f:
        f.write(sshd.ssh_config(prefix, block, n, key, st))

    procs = []
    for i in range(1, n + 1):
        ns = sshd.layout(st, i)[0]
        with open(os.path.join(sd, "sshd-%d.conf" % i), "w") as f:
            f.write(sshd.sshd_config(prefix, i, block, sd, st))
        # the namespace only when it is not the host's own (hosts sharing one address)
        p = (sshd.spawn_sshd(prefix, i, sd, netns.host_name(prefix, i), ns)
             if ns != netns.netns_name(prefix, i) else
             sshd.spawn_sshd(prefix, i, sd, netns.host_name(prefix, i)))
        procs.append(p)
        st["pids"].append({"pid": p.pid, "host": i, "netns": ns,
                           "starttime": proc.starttime(p.pid)})
        save()
    for i, p in enumerate(procs, 1):
        _, addr, port = sshd.layout(st, i)
        sshd.wait_listening(addr, port, p, os.path.join(sd, "sshd-%d.log" % i))
        # the pid is sshd itself once it listens: record its exec'd start time (same)
        st["pids"][i - 1]["starttime"] = proc.starttime(p.pid)
    save()

    desc = {
        "prefix": prefix,
        "block": block,
        "subnet": netns.set_cidr(block),
        "bridge": {"name": br, "addr": netns.bridge_addr(block)},
        "port": sshd.SSH_PORT if not st.get("ports") else None,
        "ipv6": bool(st.get("ipv6")), "shared": bool(st.get("shared")),
        "state_dir": sd,
        "ssh_config": os.path.join(sd, "ssh_config"),
        "key": key,
        "hosts": [{
            "index": i,
            "addr": sshd.layout(st, i)[1],
            "port": sshd.layout(st, i)[2],
            "hostname": netns.host_name(prefix, i),
            "netns": sshd.layout(st, i)[0],
            "veth": netns.veth_root(prefix, 1 if st.get("shared") else i),
            "sshd_pid": procs[i - 1].pid,
            "sshd_config": os.path.join(sd, "sshd-%d.conf" % i),
            "sshd_log": os.path.join(sd, "sshd-%d.log" % i),
        } for i in range(1, n + 1)],
    }
    if verify:
        sshd.verify_ssh(desc)
    state.write_json(os.path.join(sd, "hosts.json"), desc)
    return desc


def down(prefix="mlt", force=False):
    """Tear down everything for this prefix.  Idempotent; never raises for 'absent'.
    Refuses (unless force) a set owned by another live process, e.g. a running pytest
    session: its owner tears it down itself."""
    state.check_prefix(prefix)
    with state.lock():
        st = state.read_json(state.state_path(prefix)) or {}
        owner = st.get("owner_pid")
        if (not force and owner and owner != os.getpid()
                and proc.alive(owner, st.get("owner_starttime"))):
            raise TestHostsError(
                "set %r belongs to live process %d (a test session?); it tears the set "
                "down itself. Use --force to remove it anyway." % (prefix, owner))
        down_locked(prefix)


def down_locked(prefix):
    """down() with the lock held and no owner check."""
    st = state.read_json(state.state_path(prefix)) or {}
    # namespaces: those recorded, plus any '<prefix><digits>' left by a lost state file
    pattern = re.compile(r"^%s\d+$" % re.escape(prefix))
    namespaces = list(st.get("netns") or [])
    for ns in netns.netns_list():
        if pattern.match(ns) and ns not in namespaces:
            namespaces.append(ns)

    # 1. processes: the recorded sshd pids (if still the same process) + descendants
    roots = [rec["pid"] for rec in st.get("pids") or []
             if proc.alive(rec["pid"], rec.get("starttime"))]
    victims = roots + proc.descendants(roots)
    # anything still inside our namespaces was started there by us (via our sshd)
    for pids in scan.pids_by_netns(namespaces).values():
        victims += [pid for pid in pids if pid not in victims]
    if victims:
        proc.kill_all(victims)
    proc.reap([rec["pid"] for rec in st.get("pids") or []])

    # 2. namespaces, veths, bridge
    netns.remove(prefix, namespaces, st.get("veths") or [], st.get("bridge"),
                 n_guess=max(int(st.get("n") or 0), 0))

    # 3. the authorized_keys line (exact recorded line, else by marker for this prefix)
    sshd.remove_auth_lines(prefix, st.get("auth_line"))
    sshd.remove_auth_lines(prefix)      # also lines of this prefix left by a lost state
    sshd.cleanup_created_ssh_dir()

    # 4. the state dir
    shutil.rmtree(state.state_dir(prefix), ignore_errors=True)


def processes(prefix):
    """{host index: [(pid, cmdline), ...]} of every live process inside each host of the
    set except its listening sshd: after a job, what the job left behind there."""
    st = state.load(prefix)
    listeners = {rec["pid"] for rec in st.get("pids") or []}
    index = {}
    for i in range(1, int(st["n"]) + 1):   # hosts sharing one namespace: counted as the first
        index.setdefault(sshd.layout(st, i)[0], i)
    out = {}
    for ns, pids in scan.pids_by_netns(list(index)).items():
        out[index[ns]] = [(pid, scan.cmdline(pid)) for pid in pids
                          if pid not in listeners and not scan.is_zombie(pid)]
    return out


def status(prefix=None):
    """Every set (or the one of prefix): state, owner, and per host its namespace, sshd
    liveness and whether its sshd port answers."""
    out = []
    names = [prefix] if prefix else state.set_prefixes()
    present = set(netns.netns_list())
    for p in names:
        sd = state.state_dir(p)
        st = state.read_json(state.state_path(p))
        desc = state.read_json(os.path.join(sd, "hosts.json"))
        if st is None:
            out.append({"prefix": p, "state": "absent" if not os.path.isdir(sd)
                        else "broken (no state.json)"})
            continue
        hosts = []
        for rec in st.get("pids") or []:
            i = rec["host"]
            _, addr, port = sshd.layout(st, i)
            hosts.append({"index": i, "addr": addr, "port": port, "hostname": netns.host_name(p, i),
                          "netns": rec["netns"], "netns_present": rec["netns"] in present,
                          "sshd_pid": rec["pid"],
                          "sshd_alive": proc.alive(rec["pid"], rec.get("starttime")),
                          "listening": sshd.listening(addr, port)})
        out.append({"prefix": p, "state": "up" if desc else "partial",
                    "owner_pid": st.get("owner_pid"), "owner_alive": state.owner_alive(st),
                    "block": st["block"], "ssh_config": os.path.join(sd, "ssh_config"),
                    "hosts": hosts})
    return out
