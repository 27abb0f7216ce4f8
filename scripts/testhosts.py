#!/usr/bin/env python3
"""Real multi-node test hosts on one machine, for manual use: the CLI of the test
package tests/helpers/hosts/ (network namespaces in 10.231.0.0/24, each with its own sshd).

    testhosts.py up N [--prefix mlt] [--block B] [--owner-pid PID] [--no-verify]
    testhosts.py down [--prefix mlt] [--force]
    testhosts.py status [--prefix mlt]
    testhosts.py kill-sshd|crash|start-sshd|link-down|link-up I [--prefix mlt]

See tests/helpers/hosts/__init__.py for what ``up`` creates and ``down`` removes.
"""
import os
import sys

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from helpers.hosts.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
