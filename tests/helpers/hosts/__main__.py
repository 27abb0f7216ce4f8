"""``python3 -m helpers.hosts ...`` (from tests/): the manual CLI, as scripts/testhosts.py."""
import sys

from .cli import main

sys.exit(main())
