"""``python3 -m hosts ...`` (from tests/): the manual CLI, as scripts/testhosts.py."""
import sys

from hosts.cli import main

sys.exit(main())
