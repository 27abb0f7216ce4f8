"""mpilaunch/netif.py reads getifaddrs through ctypes in place of psutil.net_if_addrs (
the psutil import cost every launch ~13 ms): the same addresses, in the same interface order."""
import os
import socket
import subprocess
import sys

import psutil
import pytest

from mpilaunch import netif
from mpilaunch.rank import agree


def _psutil_view():
    return [(name, int(a.family), a.address.split("%", 1)[0])
            for name, addrs in psutil.net_if_addrs().items() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)]


def test_same_addresses_and_order_as_psutil():
    assert netif.addresses() == _psutil_view()


def test_inside_a_namespace_with_an_extra_address(tmp_path):
    """A fresh network namespace with a test address: both readers see exactly lo and it."""
    name = f"mlnetif{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("needs root and ip netns")
    try:
        def inside(*cmd):
            return subprocess.run(["ip", "netns", "exec", name, *cmd], capture_output=True,
                                  text=True, check=True).stdout
        inside("ip", "link", "set", "lo", "up")
        inside("ip", "addr", "add", "10.231.0.250/32", "dev", "lo")
        code = ("from mpilaunch import netif; from mpilaunch.rank import agree; "
                "print(netif.addresses()); print(agree.local_ipv4s())")
        out = inside(sys.executable, "-c", code).splitlines()
        assert out[0] == str([("lo", 2, "127.0.0.1"), ("lo", 2, "10.231.0.250"),
                              ("lo", 10, "::1")])
        assert out[1] == "['10.231.0.250']"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_interface_towards_an_address_of_this_host_names_its_interface():
    found = [(name, addr) for name, fam, addr in _psutil_view()
             if fam == socket.AF_INET and name != "lo" and not addr.startswith("169.254.")]
    if not found:
        pytest.skip("no non-loopback IPv4 address here")
    name, addr = found[0]
    assert agree.interface_towards(addr) == name
    assert agree.local_ipv4s()[0] == addr
