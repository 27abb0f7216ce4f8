"""The floor of any "adapter between mpirun and the worker" design (not mpilaunch code):
one extra interpreter that spawns the worker and waits for it, nothing else.

    python min_interposer.py -- ARGV...
"""
import os
import sys

argv = sys.argv[sys.argv.index("--") + 1:]
pid = os.posix_spawn(argv[0], argv, os.environ)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
