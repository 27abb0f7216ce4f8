"""Ports for tests: never assume a fixed one is free (MindSpore processes of other tests or
jobs may hold 8118 or anything else)."""
import socket


def free_port():
    """A TCP port free on 127.0.0.1 right now, as the string a command line takes
    (``int(free_port())`` where a number is needed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", int(port)))
            return True
        except OSError:
            return False
