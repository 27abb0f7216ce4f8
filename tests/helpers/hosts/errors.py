"""The two errors of the test hosts."""


class TestHostsError(RuntimeError):
    """Bringing the hosts up (or acting on them) failed; the message says why."""
    __test__ = False  # not a test class


class PrefixInUse(TestHostsError):
    """A live set (CLI-made, or owned by a live process) already has this prefix."""
