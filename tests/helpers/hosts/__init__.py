"""Real multi-node test hosts on one machine: network namespaces with their own sshd.

``up(n, prefix)`` creates, in the root network namespace, a bridge ``<prefix>br0`` and
for every host i (1..n):

* a network namespace ``<prefix>i`` with ``lo`` up and ``eth0`` (a veth onto the bridge)
  at ``10.231.0.(32*block+10+i)`` (a small set), or ``10.231.(block-7).(10+i)`` (a wide one,
  ``wide=True``: up to 240 hosts, for the scale tests and the bench);
* an ``sshd`` inside it, in its own UTS namespace (hostname ``<prefix>-hosti``) and its
  own mount namespace with a private tmpfs on ``/run`` (so each has its own
  ``/run/sshd``), listening on port 2222 of that address, key-only root login.

All addresses are inside 10.231.0.0/16: the small sets in 10.231.0.0/24, split into eight
/27 blocks (block 0: bridge 10.231.0.1, hosts .11, .12, ...), the wide sets each in a /24 of
10.231.1.0-10.231.16.255, so several prefixes of either kind can be up at once.  The
namespaces get no default route, so nothing inside can reach any other address.

The state dir ``/tmp/mpilaunch-testhosts/<prefix>/`` (0700) holds a dedicated client key,
an ``ssh_config`` (``ssh -F <state>/ssh_config <addr>``), per-host sshd configs and logs,
``state.json`` (every resource, written before/as it is created, so ``down`` can undo a
half-failed ``up``) and ``hosts.json`` (the description for callers).  The client key's
public half is appended to /root/.ssh/authorized_keys (restricted with
``from="10.231.0.0/24"``, a wide set's own /24, and a marker comment); ``down`` removes exactly
that line.  ``processes(prefix)`` lists what runs inside each host besides its sshd.

``down(prefix)`` kills exactly the processes the set started and removes everything
``up`` made; it is idempotent.  A set made with ``owner_pid`` is stale (reclaimed by the
next ``up``) once that process is gone.

Modules: ``proc`` (commands, our processes by PID), ``scan`` (processes per host, one pass
over /proc), ``netns`` (namespaces, bridge,
veths, addresses), ``sshd`` (keys, sshd, authorized_keys), ``state`` (state dir, lock),
``hostset`` (up/down/status), ``faults`` (kill-sshd, crash, link-down/up), ``cli`` (the
manual command, also ``scripts/testhosts.py``), ``nsinit`` (the in-namespace exec stub).
Standard library only; every command is an argv list (no shell).
"""
from .errors import PrefixInUse, TestHostsError
from .faults import crash, kill_sshd, set_link, start_sshd
from .hostset import down, missing_prereqs, prefix_in_use, processes, status, up
from .proc import alive
from .sshd import AUTH_KEYS, MARKER, SSH_PORT
from .state import state_dir

__all__ = ["TestHostsError", "PrefixInUse", "up", "down", "status", "missing_prereqs",
           "prefix_in_use", "processes", "kill_sshd", "crash", "start_sshd", "set_link", "alive",
           "state_dir", "AUTH_KEYS", "MARKER", "SSH_PORT"]
