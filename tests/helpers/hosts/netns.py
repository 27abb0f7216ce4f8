"""Network: the namespaces, the bridge, the veths and the addresses, all inside
10.231.0.0/24.  That /24 is split into eight /27 blocks so that several prefixes can be
up at once without overlapping routes: block b gives the bridge 10.231.0.(32b+1) and
host i 10.231.0.(32b+10+i).  The namespaces get no default route."""
import os
import re

from . import proc

SUBNET = "10.231.0"          # the one /24 this tool ever uses
SUBNET_CIDR = SUBNET + ".0/24"
BLOCK_SIZE = 32              # /27 blocks
N_BLOCKS = 8
MAX_HOSTS = 20               # base+11 .. base+30 inside a /27


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


def netns_list():
    p = proc.run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def netns_pids(ns):
    p = proc.run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def link_exists(name):
    return os.path.exists("/sys/class/net/%s" % name)


def blocks_with_addresses():
    """Blocks that hold an address on some root-namespace interface."""
    used = set()
    p = proc.run(["ip", "-4", "-o", "addr", "show"], check=False)
    for m in re.finditer(r"inet (\d+\.\d+\.\d+)\.(\d+)/", p.stdout):
        if m.group(1) == SUBNET:
            used.add(int(m.group(2)) // BLOCK_SIZE)
    return used


def netns_unavailable():
    """A reason why `ip netns` cannot even be listed here, or None."""
    p = proc.run(["ip", "netns", "list"], check=False)
    if p.returncode != 0:
        return "ip netns unavailable: %s" % p.stderr.strip()
    return None


def probe_netns(prefix):
    """Create and delete a throwaway namespace: does `ip netns add` work here?"""
    probe = "%sprobe" % prefix
    p = proc.run(["ip", "netns", "add", probe], check=False)
    proc.quiet(["ip", "netns", "del", probe])
    if p.returncode != 0:
        return "ip netns add does not work here: %s" % p.stderr.strip()
    return None


def add_bridge(prefix, block):
    br = bridge_name(prefix)
    proc.run(["ip", "link", "add", "name", br, "type", "bridge"])
    proc.quiet(["ip", "link", "set", "dev", br, "addrgenmode", "none"])  # no IPv6 chatter
    proc.run(["ip", "addr", "add", "%s/27" % bridge_addr(block), "dev", br])
    proc.run(["ip", "link", "set", "dev", br, "up"])


def add_netns(ns):
    proc.run(["ip", "netns", "add", ns])


def add_host_link(prefix, i, block):
    """veth <prefix><i>b on the bridge <-> eth0 (host i's address) inside <prefix><i>;
    lo and eth0 up."""
    ns, vr = netns_name(prefix, i), veth_root(prefix, i)
    proc.run(["ip", "link", "add", "name", vr, "type", "veth",
              "peer", "name", "eth0", "netns", ns])
    proc.quiet(["ip", "link", "set", "dev", vr, "addrgenmode", "none"])
    proc.run(["ip", "link", "set", "dev", vr, "master", bridge_name(prefix)])
    proc.run(["ip", "link", "set", "dev", vr, "up"])
    proc.quiet(["ip", "-n", ns, "link", "set", "dev", "eth0", "addrgenmode", "none"])
    proc.run(["ip", "-n", ns, "addr", "add", "%s/27" % host_addr(block, i), "dev", "eth0"])
    proc.run(["ip", "-n", ns, "link", "set", "dev", "eth0", "up"])
    proc.run(["ip", "-n", ns, "link", "set", "dev", "lo", "up"])


def set_link(prefix, i, up):
    """Host i's link (its root-namespace veth end) up or down."""
    proc.run(["ip", "link", "set", "dev", veth_root(prefix, i), "up" if up else "down"])


def remove(prefix, namespaces, veths, bridge, n_guess=0):
    """Delete the namespaces, the veths (recorded ones plus '<prefix><i>b' for every
    host index that may exist) and the bridge.  Best effort, idempotent."""
    for ns in namespaces:
        proc.quiet(["ip", "netns", "del", ns])
    veths = list(veths)
    for i in range(1, max(n_guess, len(namespaces)) + 1):
        if veth_root(prefix, i) not in veths:
            veths.append(veth_root(prefix, i))
    for v in veths:
        if link_exists(v):
            proc.quiet(["ip", "link", "del", "dev", v])
    br = bridge or bridge_name(prefix)
    if link_exists(br):
        proc.quiet(["ip", "link", "del", "dev", br])
