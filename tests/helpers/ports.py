"""Ports for tests: never assume a fixed one is free (MindSpore processes of other tests or
jobs may hold 8118 or anything else)."""
import contextlib
import errno
import random
import socket

from mpilaunch import contract

_GIVEN = set()      # this process's answers: two calls never give the same port


def _ephemeral():
    """The kernel's range for ports picked by bind(0) and connect()."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _candidates():
    low, high = _ephemeral()
    if low - 10000 >= 2000:
        return range(10000, low)
    return range(high + 1, 65536)


def free_port():
    """A TCP port free right now, as the string a command line takes (``int(free_port())``
    where a number is needed). Outside the kernel's ephemeral range: a port that bind(0) gave
    was taken again, between this call and the job's bind, by another socket's bind(0) (the
    launcher's control channel, mpirun's own listeners): '--master-port 47113 is already in
    use' once in about four full runs."""
    choices = _candidates()
    for _ in range(500):
        port = random.choice(choices)
        if port in _GIVEN:
            continue
        if port_free(port) and port_free(port, ""):
            _GIVEN.add(port)
            return str(port)
    raise RuntimeError(f"no free port in {choices.start}-{choices.stop - 1}")


def port_free(port, addr="127.0.0.1"):
    with socket.socket() as s:
        try:
            s.bind((addr, int(port)))
            return True
        except OSError:
            return False


# The ports mpilaunch uses when none is given (the only fixed one: msrun's scheduler port, the
# default --master_port). The test session holds them busy (tests/conftest.py), so a test that
# launches without giving a port fails on every machine, not only beside a job that holds one.
FIXED_DEFAULTS = (contract.DEFAULT_MASTER_PORT,)


@contextlib.contextmanager
def held_busy(ports=FIXED_DEFAULTS):
    """Keep ``ports`` busy on every IPv4 address of this machine while the block runs. The
    sockets take SO_REUSEPORT, so two test sessions on one machine can both hold a port (and a
    port someone else already holds is busy anyway); rank 0's port check binds without it and
    is refused."""
    held = []
    try:
        for port in ports:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                s.bind(("0.0.0.0", port))
                s.listen(1)
            except OSError as exc:
                s.close()
                if exc.errno != errno.EADDRINUSE:
                    raise
                continue
            held.append(s)
        yield
    finally:
        for s in held:
            s.close()
