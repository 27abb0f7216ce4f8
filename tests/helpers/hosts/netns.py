"""Network: the namespaces, the bridge, the veths and the addresses, all inside
10.231.0.0/16.  Two kinds of address block, so that several sets can be up at once without
overlapping routes:

* small sets (blocks 0..7): 10.231.0.0/24 split into eight /27s; block b gives the bridge
  10.231.0.(32b+1) and host i 10.231.0.(32b+10+i), up to 20 hosts;
* wide sets (blocks 8..23, the scale sets of up to 240 hosts): block 8+k is all of
  10.231.(1+k).0/24, bridge 10.231.(1+k).1 and host i 10.231.(1+k).(10+i).

The namespaces get no default route.  Bringing a set up runs one ``ip -batch`` for the
root-namespace side and one per namespace (not ~9 ``ip`` processes per host), so 64 hosts
come up in seconds."""
import os
import re

from . import proc
from .errors import TestHostsError

RANGE = "10.231"             # the /16 this tool ever uses
SUBNET = "10.231.0"          # the /24 of the small sets
SUBNET_CIDR = SUBNET + ".0/24"
RANGE_CIDR = RANGE + ".0.0/16"
BLOCK_SIZE = 32              # /27 blocks
N_BLOCKS = 8
MAX_HOSTS = 20               # base+11 .. base+30 inside a /27
WIDE_BLOCKS = range(N_BLOCKS, N_BLOCKS + 16)   # 10.231.1.0/24 .. 10.231.16.0/24
MAX_WIDE_HOSTS = 240         # .11 .. .250 inside a /24


def is_wide(block):
    return block >= N_BLOCKS


def max_hosts(block):
    return MAX_WIDE_HOSTS if is_wide(block) else MAX_HOSTS


def _octet(block):
    return block - N_BLOCKS + 1 if is_wide(block) else 0


def block_base(block):
    return 0 if is_wide(block) else BLOCK_SIZE * block


def mask_len(block):
    return 24 if is_wide(block) else 27


def block_cidr(block):
    return "%s.%d.%d/%d" % (RANGE, _octet(block), block_base(block), mask_len(block))


def set_cidr(block):
    """The addresses a set's tests may target (and its key is accepted from): a wide set's
    /24; for the small sets the whole 10.231.0.0/24, as always."""
    return block_cidr(block) if is_wide(block) else SUBNET_CIDR


def host_glob(block):
    """An ssh_config Host pattern covering the block's addresses."""
    return "%s.%d.*" % (RANGE, _octet(block))


def bridge_addr(block):
    return "%s.%d.%d" % (RANGE, _octet(block), block_base(block) + 1)


def host_addr(block, i):
    return "%s.%d.%d" % (RANGE, _octet(block), block_base(block) + 10 + i)


# IPv6-only sets (``ipv6=True``): a ULA /64 per block inside fd00:231::/32, on the bridge and in
# each namespace (``nodad``: usable at once), and no IPv4 address in the namespaces.
V6_RANGE = "fd00:231"


def _v6(text):
    """The canonical (compressed) spelling, the one programs print back."""
    import ipaddress

    return str(ipaddress.IPv6Address(text))


def bridge_addr6(block):
    return _v6("%s:%d::1" % (V6_RANGE, block))


def host_addr6(block, i):
    return _v6("%s:%d::%d" % (V6_RANGE, block, 10 + i))


def host_glob6(block):
    """An ssh_config Host pattern covering the block's IPv6 addresses."""
    return _v6("%s:%d::" % (V6_RANGE, block)) + "*"


def set_cidr6(block):
    return "%s:%d::/64" % (V6_RANGE, block)


def block_of(addr):
    """The block an address of ours lies in, or None (not in a block of ours)."""
    m = re.match(r"^10\.231\.(\d+)\.(\d+)$", addr)
    if not m:
        return None
    octet, last = int(m.group(1)), int(m.group(2))
    if octet == 0:
        return last // BLOCK_SIZE
    block = N_BLOCKS + octet - 1
    return block if block in WIDE_BLOCKS else None


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
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/", p.stdout):
        block = block_of(m.group(1))
        if block is not None:
            used.add(block)
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


def add_bridge(prefix, block, ipv6=False):
    br = bridge_name(prefix)
    proc.run(["ip", "link", "add", "name", br, "type", "bridge"])
    proc.quiet(["ip", "link", "set", "dev", br, "addrgenmode", "none"])  # no IPv6 chatter
    # the IPv4 address also marks the block as taken (blocks_with_addresses), in IPv6 sets too
    proc.run(["ip", "addr", "add", "%s/%d" % (bridge_addr(block), mask_len(block)), "dev", br])
    if ipv6:
        proc.run(["ip", "-6", "addr", "add", bridge_addr6(block) + "/64", "dev", br, "nodad"])
    proc.run(["ip", "link", "set", "dev", br, "up"])


def batch(lines, ns=None, optional=()):
    """Run ``ip [-n ns] -batch`` over ``lines`` (one process); a failing line raises, except
    those whose index is in ``optional`` (best-effort settings such as addrgenmode)."""
    argv = ["ip"] + (["-n", ns] if ns else []) + ["-force", "-batch", "-"]
    p = proc.run(argv, check=False, input="\n".join(lines) + "\n")
    failed = [int(n) - 1 for n in re.findall(r"Command failed -:(\d+)", p.stderr)]
    bad = [n for n in failed if n not in optional]
    if bad or (p.returncode != 0 and not failed):
        raise TestHostsError("ip -batch%s failed at %s: %s" % (
            " -n " + ns if ns else "", [lines[n] for n in bad if n < len(lines)] or "?",
            p.stderr.strip()))


def add_host_links(prefix, first, last, block, ipv6=False):
    """Hosts first..last at once: their namespaces and veths (one root-side batch), then
    inside each namespace its address (IPv6 only with ``ipv6``) and links (one batch per
    namespace)."""
    root, optional = [], set()
    for i in range(first, last + 1):
        ns, vr = netns_name(prefix, i), veth_root(prefix, i)
        root += ["netns add %s" % ns,
                 "link add name %s type veth peer name eth0 netns %s" % (vr, ns)]
        optional.add(len(root))
        root += ["link set dev %s addrgenmode none" % vr,    # no IPv6 chatter
                 "link set dev %s master %s" % (vr, bridge_name(prefix)),
                 "link set dev %s up" % vr]
    batch(root, optional=optional)
    for i in range(first, last + 1):
        addr = ("addr add %s/64 dev eth0 nodad" % host_addr6(block, i) if ipv6 else
                "addr add %s/%d dev eth0" % (host_addr(block, i), mask_len(block)))
        batch(["link set dev eth0 addrgenmode none", addr,
               "link set dev eth0 up", "link set dev lo up"],
              ns=netns_name(prefix, i), optional={0})


def set_link(prefix, i, up):
    """Host i's link (its root-namespace veth end) up or down."""
    proc.run(["ip", "link", "set", "dev", veth_root(prefix, i), "up" if up else "down"])


def remove(prefix, namespaces, veths, bridge, n_guess=0):
    """Delete the namespaces, the veths (recorded ones plus '<prefix><i>b' for every
    host index that may exist) and the bridge.  Best effort, idempotent: two ``ip -batch``
    runs whatever the number of hosts (deleting a namespace also deletes its veth pair)."""
    lines = ["netns del %s" % ns for ns in namespaces if os.path.exists("/run/netns/" + ns)]
    if lines:
        proc.quiet_input(["ip", "-force", "-batch", "-"], "\n".join(lines) + "\n")
    veths = list(veths)
    for i in range(1, max(n_guess, len(namespaces)) + 1):
        if veth_root(prefix, i) not in veths:
            veths.append(veth_root(prefix, i))
    br = bridge or bridge_name(prefix)
    lines = ["link del dev %s" % v for v in veths + [br] if link_exists(v)]
    if lines:
        proc.quiet_input(["ip", "-force", "-batch", "-"], "\n".join(lines) + "\n")
