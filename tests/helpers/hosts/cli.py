"""Real multi-node test hosts on one machine: network namespaces with their own sshd.

For manual use (tests use the ``testhosts`` fixture of tests/helpers/fixtures_hosts.py)::

    scripts/testhosts.py up N [--prefix mlt] [--block B] [--wide] [--owner-pid PID] [--no-verify]
                            [--ports P1,P2,...] [--shared] [--ipv6]
    scripts/testhosts.py down [--prefix mlt] [--force]
    scripts/testhosts.py status [--prefix mlt]
    scripts/testhosts.py kill-sshd|crash|start-sshd|link-down|link-up I [--prefix mlt]

(``python3 -m helpers.hosts ...`` from tests/ is the same.)  Exit status 1 with
``testhosts: <why>`` on stderr when something fails.
"""
import argparse
import json
import sys

from . import faults, hostset, nsinit
from .errors import TestHostsError
from .netns import MAX_HOSTS, MAX_WIDE_HOSTS, SUBNET_CIDR


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="create N namespace hosts with sshd")
    p_up.add_argument("n", type=int)
    p_up.add_argument("--prefix", default="mlt")
    p_up.add_argument("--block", type=int, default=None,
                      help="/27 block of %s to use (0-7; wide: 8-23; default: first free)"
                      % SUBNET_CIDR)
    p_up.add_argument("--wide", action="store_true", default=None,
                      help="a /24 of its own (up to %d hosts; default for N > %d)"
                      % (MAX_WIDE_HOSTS, MAX_HOSTS))
    p_up.add_argument("--owner-pid", type=int, default=None,
                      help="the set is stale (reclaimable) once this pid is gone")
    p_up.add_argument("--no-verify", action="store_true",
                      help="skip the ssh+hostname check of every host")
    p_up.add_argument("--ports", default=None,
                      help="each host's sshd port, comma-separated (default: 2222 each)")
    p_up.add_argument("--shared", action="store_true",
                      help="every host behind host 1's address (one namespace; needs --ports)")
    p_up.add_argument("--ipv6", action="store_true",
                      help="IPv6-only hosts (a ULA /64 in fd00:231::/32, no IPv4)")
    p_down = sub.add_parser("down", help="remove everything `up` created")
    p_down.add_argument("--prefix", default="mlt")
    p_down.add_argument("--force", action="store_true",
                        help="also remove a set whose owner process is alive")
    p_st = sub.add_parser("status", help="show sets, sshd liveness, ports")
    p_st.add_argument("--prefix", default=None)
    for name, hlp in (("kill-sshd", "kill host I's sshd (open sessions survive)"),
                      ("crash", "kill every process inside host I"),
                      ("start-sshd", "(re)start host I's sshd"),
                      ("link-down", "take host I's link down (packets lost)"),
                      ("link-up", "bring host I's link back")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("i", type=int, help="host index, 1-based")
        p.add_argument("--prefix", default="mlt")
    p_init = sub.add_parser("_nsinit", help="(internal) runs inside a new host: hostname, "
                            "private /run, exec sshd (see tests/helpers/hosts/nsinit.py)")
    p_init.add_argument("--hostname", required=True)
    p_init.add_argument("argv", nargs=argparse.REMAINDER)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        if args.cmd == "up":
            ports = [int(p) for p in args.ports.split(",")] if args.ports else None
            hostset.up(args.n, args.prefix, args.block, args.owner_pid,
                       verify=not args.no_verify, quiet=False, wide=args.wide,
                       ports=ports, shared=args.shared, ipv6=args.ipv6)
        elif args.cmd == "down":
            hostset.down(args.prefix, force=args.force)
        elif args.cmd == "status":
            print(json.dumps(hostset.status(args.prefix), indent=2, sort_keys=True))
        elif args.cmd == "kill-sshd":
            faults.kill_sshd(args.prefix, args.i)
        elif args.cmd == "crash":
            faults.crash(args.prefix, args.i)
        elif args.cmd == "start-sshd":
            print(faults.start_sshd(args.prefix, args.i))
        elif args.cmd in ("link-down", "link-up"):
            faults.set_link(args.prefix, args.i, args.cmd == "link-up")
        elif args.cmd == "_nsinit":
            rest = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            nsinit.nsinit(args.hostname, rest)
    except TestHostsError as e:
        print("testhosts: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
