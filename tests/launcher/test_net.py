"""mpilaunch/net.py: the network facts both sides use, decided once (names, addresses, ports,
"is this host here"), and cheap to import for every rank."""
import errno
import os
import re
import socket
import subprocess
import sys

import pytest

from helpers import REPO
from mpilaunch import net, netif, ssh
from mpilaunch.errors import UsageError
from mpilaunch.config.hostfile import Host


def _own_ipv4():
    ips = net.local_ipv4s()
    return ips[0] if ips else None


def test_importing_it_loads_no_socket():
    code = ("import sys; import mpilaunch.net, mpilaunch.rank.agree; "
            "print(sorted(m for m in ('socket', 'threading', 'errno', 'typing', 'json') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": REPO}).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST", "localhost.localdomain",
                                  "ip6-localhost", "127.0.0.1", "127.0.1.1", "::1"])
def test_local_names_and_loopback_are_here(name):
    assert net.is_here(name)


def test_this_machines_name_and_addresses_are_here():
    node = os.uname().nodename
    assert net.hostname() == socket.gethostname() == node
    assert net.is_here(node) and net.is_here(node.split(".")[0])
    assert net.is_here(Host(node, 2))                 # a hostfile host: its name
    own = _own_ipv4()
    if own:
        assert net.is_here(own)                       # a host written as our address


def test_other_hosts_are_not_here_unless_an_address_given_is():
    assert not net.is_here("192.0.2.1")               # TEST-NET-1: never ours
    assert not net.is_here("node-zz.invalid")
    assert net.is_here("node-zz.invalid", ["127.0.1.1"])   # the caller resolved it to us
    assert not net.is_here("node-zz.invalid", ["192.0.2.1"])


def test_all_here_rank0_is_here_spans_machines():
    here, there = Host("localhost", 2), Host("192.0.2.1", 2)
    assert net.all_here([here, Host("127.0.0.1", 1)]) and not net.all_here([here, there])
    assert net.rank0_is_here([here, there]) and not net.rank0_is_here([there, here])
    assert not net.rank0_is_here([])
    assert not net.spans_machines([here, Host(os.uname().nodename, 1)])   # one machine, twice
    assert not net.spans_machines([there])
    assert net.spans_machines([here, there]) and net.spans_machines([there, Host("198.51.100.1")])


def test_each_fact_is_defined_once_in_the_package():
    """No second "is this host here", port check, route or look-up beside net.py's (ssh.py
    and rank/agree.py had their own); other modules use net's functions themselves."""
    pkg = os.path.join(REPO, "mpilaunch")
    pattern = re.compile(r"^def (is_here|is_local|host_is_here|rank0_is_here|all_here|"
                         r"check_port|free_port|route_source|resolve|resolve_ipv4|"
                         r"local_addresses|local_ipv4s)\(", re.M)
    found = {}
    for d, _, files in os.walk(pkg):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                for m in pattern.finditer(open(path, encoding="utf-8").read()):
                    found.setdefault(m.group(1), []).append(os.path.relpath(path, pkg))
    assert all(where == ["net.py"] for where in found.values()), found
    from mpilaunch.rank import agree
    assert agree.check_port is net.check_port and agree.route_source is net.route_source
    assert ssh.resolve is net.resolve


def test_local_addresses_are_getifaddrs(monkeypatch):
    # read once per process: drop what an earlier test read (test hosts add and remove a
    # bridge address while the suite runs)
    monkeypatch.setattr(net, "_CACHE", {})
    assert net.local_addresses() == frozenset(a for _, _, a in netif.addresses())
    assert all(not a.startswith(("127.", "169.254.")) for a in net.local_ipv4s())


def test_ipv4s_and_resolve_ipv4():
    assert net.ipv4s("127.0.0.1") == ["127.0.0.1"]
    assert net.resolve_ipv4("127.0.0.1") == "127.0.0.1"
    assert net.resolve_ipv4("localhost").startswith("127.")


def test_resolve_ipv4_takes_the_resolvers_first_answer(monkeypatch):
    answer = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, 0))
              for ip in ("10.0.0.9", "10.0.0.1", "10.0.0.9")]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **kw: answer)
    assert net.resolve_ipv4("multi.example") == "10.0.0.9"       # not sorted()[0]
    assert net.ipv4s("multi.example") == ["10.0.0.9", "10.0.0.1"]


def test_resolve_ipv4_names_the_flag(monkeypatch):
    def no_such_host(*a, **kw):   # never ask a real resolver from a test
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    with pytest.raises(UsageError) as err:
        net.resolve_ipv4("nope.invalid", "--master_addr")
    assert str(err.value) == ("--master_addr='nope.invalid': does not resolve to an address "
                              "(Name or service not known); give rank 0's host name or one of "
                              "its addresses (or leave it out)")
    assert net.ipv4s("nope.invalid") == []


def test_resolve_with_a_time_out(monkeypatch):
    addrs, why = net.resolve("localhost", 5)
    assert addrs and why is None
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda *a, **kw: (_ for _ in ()).throw(socket.gaierror(-2, "Name or service not known")))
    assert net.resolve("node-zz", 5) == (None, "Name or service not known")


def test_route_source_of_loopback_is_loopback():
    assert net.route_source("127.0.0.1") == "127.0.0.1"


def test_check_port_kinds():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(net.PortError) as err:
            net.check_port("127.0.0.1", port, "hostA")
    e = err.value
    assert (e.kind, e.port, e.addr) == (net.PORT_IN_USE, port, "127.0.0.1")
    assert isinstance(e, UsageError)                  # the adapter's exit 2, one line
    assert f"--master-port {port} is already in use on host hostA" in str(e)
    with pytest.raises(net.PortError) as err:
        net.check_port("198.51.100.77", 0, "h")       # TEST-NET-2: not an address of ours
    assert err.value.kind == net.ADDR_NOT_HERE and "not an address of rank 0's host h" in str(err.value)
    net.check_local_addr("127.0.0.1", "h")            # loopback: always bindable
    own = _own_ipv4()
    if own:
        net.check_local_addr(own, "h")


def test_check_port_refused_by_the_kernel_is_not_allowed(monkeypatch):
    import _socket   # what net's port check binds with

    class Refusing(_socket.socket):
        def bind(self, address):   # what a port below 1024 gives a user without the capability
            if address[1] == 80:
                raise OSError(errno.EACCES, "Permission denied")
            return super().bind(address)
    monkeypatch.setattr(_socket, "socket", Refusing)
    with pytest.raises(net.PortError) as err:
        net.check_port("127.0.0.1", 80, "h", check_addr=False)
    assert err.value.kind == net.PORT_NOT_ALLOWED


def test_free_port_is_free_and_checkable():
    port = net.free_port()
    assert 0 < port < 65536
    assert net.check_port(net.LOOPBACK, port, "h") == port


def test_check_config_and_rankcheck_ask_the_same_rule(tmp_path):
    """The preflight's 'needs ssh', config's 'ranks on several hosts' and the rank-side checks
    all come from net.is_here (check/hosts.py once had its own, stricter copy)."""
    from mpilaunch import check
    from mpilaunch.config import launchconfig, options
    own = _own_ipv4()
    here = ["localhost", "127.0.0.2", os.uname().nodename] + ([own] if own else [])
    for name in here:
        assert not check.hosts_needing_ssh([Host(name, 1)]), name
    assert check.hosts_needing_ssh([Host("localhost"), Host("192.0.2.1")])

    script = tmp_path / "mpi_prog.py"
    script.write_text("import mpi4py\n")

    def build(hosts):
        args = options.parser(options.RUN).parse_args(["-H", hosts, str(script)])
        return launchconfig.build(args, {"PATH": os.environ.get("PATH", "")})
    assert build(f"localhost:1,{here[-1]}:1").np == 2     # one machine named twice: supervised
    with pytest.raises(UsageError, match="ranks on several hosts"):
        build("localhost:1,192.0.2.1:1")


# rank 0's address for a multi-host job whose rank 0 runs here, hosts given by address: the
# launcher decides it, so no adapter needs MPI_Init to learn it

def test_rank0_address_towards_the_first_other_host():
    from mpilaunch.config import hostfile as hf

    assert net.rank0_address((hf.Host("localhost", 2), hf.Host("10.231.0.77", 2))) == net.route_source("10.231.0.77")


def test_rank0_address_names_are_left_to_the_ranks_agreement():
    from mpilaunch.config import hostfile as hf

    # a name lookup could wait on DNS: the launcher never makes one for this
    assert net.rank0_address((hf.Host("localhost", 1), hf.Host("node-b", 1))) is None


def test_rank0_address_single_host_needs_nothing():
    from mpilaunch.config import hostfile as hf

    assert net.rank0_address((hf.Host("localhost", 4),)) is None


ROUTES = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
ib0\t0000E70A\t00000000\t0001\t0\t0\t100\t0000FFFF\t0\t0\t0
bond0\t0001E70A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
slow0\t0001E70A\t00000000\t0001\t0\t0\t50\t00FFFFFF\t0\t0\t0
down0\t0201E70A\t00000000\t0000\t0\t0\t0\tFFFFFFFF\t0\t0\t0
"""


def test_route_interface_is_the_most_specific_up_route_with_the_lowest_metric(tmp_path):
    """/proc/net/route's words (addresses in host byte order, as on this little-endian
    machine): the /24 beats the /16 and the default; of two equal /24s the lower metric wins;
    a route that is not up (flags without RTF_UP) is skipped."""
    if sys.byteorder != "little":
        pytest.skip("the table above is written in little-endian order")
    table = tmp_path / "route"
    table.write_text(ROUTES)
    got = {a: net.route_interface(a, str(table)) for a in
           ("10.231.1.2", "10.231.7.9", "192.0.2.7", "10.231.1.255")}
    assert got == {"10.231.1.2": "bond0", "10.231.7.9": "ib0", "192.0.2.7": "eth0",
                   "10.231.1.255": "bond0"}
    assert net.route_interface("host-name", str(table)) is None
    assert net.route_interface("10.0.0.1", str(tmp_path / "missing")) is None
    table.write_text(ROUTES.splitlines()[0] + "\n")
    assert net.route_interface("10.231.1.2", str(table)) is None   # no route: the slow way


def test_route_interface_agrees_with_the_kernel_for_this_machines_routes():
    """Each destination of this machine's own table: the interface the file gives is the
    one holding the source address the kernel picks (the slow way, agree.interface_towards'
    fallback)."""
    from mpilaunch import netif

    holders = {}
    for name, family, address in netif.addresses():
        if family == netif.AF_INET:
            holders.setdefault(address, name)
    dests = []
    with open("/proc/net/route") as fh:
        for line in list(fh)[1:]:
            f = line.split()
            if int(f[3], 16) & 1 and f[1] != "00000000":
                raw = int(f[1], 16).to_bytes(4, sys.byteorder)
                dests.append(".".join(str(b) for b in raw[:3]) + ".77")
    for dest in dests:
        src = net.route_source(dest)
        if src in holders:
            assert net.route_interface(dest) == holders[src], dest


# ---------------------------------------------------------------- IPv6

def test_ipv6_literals_are_their_own_answer_and_urls_bracket_them():
    assert net.resolve_ipv4("fd00:231::11") == "fd00:231::11"
    assert net.resolve_ipv4("[fd00:231::11]") == "fd00:231::11"
    assert net.is_ipv6("fd00::1") and not net.is_ipv6("fe80::1%eth0") and not net.is_ipv6("10.0.0.1")
    assert net.url_host("fd00::1") == "[fd00::1]" and net.url_host("10.0.0.1") == "10.0.0.1"


def test_a_name_with_only_ipv6_addresses_gives_its_first(monkeypatch):
    def answer(name, port, family=0, *a, **kw):
        if family == socket.AF_INET:
            raise socket.gaierror(socket.EAI_NODATA, "No address associated with hostname")
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::7", 0, 0, 0))]
    monkeypatch.setattr(socket, "getaddrinfo", answer)
    assert net.resolve_ipv4("v6only.example") == "fd00::7"


def test_ipv6_route_table_most_specific_route_up(tmp_path):
    from mpilaunch import netif

    table = tmp_path / "ipv6_route"
    table.write_text(
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "fd000231000000000000000000000001 00000400 00000001 00000000 00000003 eth1\n"
        "fd000231000000000000000000000000 40 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n"
        "fd000231000000000000000000000011 80 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 00000000 00000002 00000000 80200001 lo\n"
        "fd000231000000000000000000000099 80 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 00000000 00000002 00000000 00200200 eth0\n")
    assert net.route_interface("fd00:231::12", str(table)) == "eth0"       # the /64
    assert net.route_interface("fd00:231::11", str(table)) == "lo"         # its own address
    assert net.route_interface("2001:db8::1", str(table)) == "eth1"        # the default route
    assert net.route_interface("fd00:231::99", str(table)) == "eth0"       # a reject route is no way
    assert netif.route_interface6("fd00::1", str(tmp_path / "absent")) is None


def test_rank0_address_for_ipv6_literals():
    from mpilaunch.config.hostfile import Host

    assert net.rank0_address([Host("fd00:231::11"), Host("fd00:231::12")]) == "fd00:231::11"
