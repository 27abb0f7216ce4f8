"""A backend of a few lines whose starter is a real Python process: it prints the adapters'
status lines it is given, then exits with the code it is given. starter.run_attempt supervises
it exactly as it does Open MPI, Hydra and srun (tests/launcher/supervise/test_starter.py), and
the loop of attempts runs it attempt after attempt (tests/launcher/attempts/test_loop.py)."""
import json
import os
import sys
import time
from collections import namedtuple

from mpilaunch.backends.base import Backend, Plan as PlanBase
from mpilaunch.contract import STATUS_PREFIX

STARTER = """\
import json, os, sys, time
print("starter output", flush=True)
for extra in json.loads(sys.argv[1]):
    line = {"v": 1, "rank": 0, "host": "h", "role": "worker", "event": "exit", "code": None,
            "signal": None, "cause": "self", "log": None, "tail": [], "t": time.time()}
    line.update(extra)
    sys.stderr.write(%r + json.dumps(line) + "\\n")
    sys.stderr.flush()
time.sleep(float(sys.argv[2]))
sys.exit(int(sys.argv[3]))
""" % STATUS_PREFIX


class Plan(namedtuple("Plan", "argv hostfile_path tune_path stdin scheduler extra_env np"), PlanBase):
    """A plan of its own: what the supervision reads of any plan comes from backends.base.Plan."""

    __slots__ = ()


def report(rank, code=None, cause="self", **more):
    """A status line's fields: rank ``rank``'s worker exited ``code`` (``cause``: self, or
    terminated by the teardown); ``more``: any other field (role, event, signal, message)."""
    return dict(rank=rank, code=code, cause=cause, **more)


def toy_plan(run_dir, reports, sleep=0.0, rc=0, np=0):
    """The plan of a starter that reports ``reports`` (``[rank, code, cause]`` or a dict of
    :func:`report`), sleeps ``sleep`` s and exits ``rc``."""
    lines = [r if isinstance(r, dict) else report(*r) for r in reports]
    argv = (sys.executable, "-c", STARTER, json.dumps(lines), str(sleep), str(rc))
    return Plan(argv, os.path.join(run_dir, "hostfile"), os.path.join(run_dir, "tune.env"), "none",
                None, {"TOY_ENV": "1"}, np)


class Toy(Backend):
    """A starter that reports what it is given and exits; it reads one file. ``attempts``:
    for :meth:`plan`, each attempt's (reports, rc) in turn; ``configs``: the config each plan
    was made from; ``calls``: what the supervision asked of the backend."""
    program = "toy"

    def __init__(self, attempts=()):
        super().__init__()
        self.calls = []
        self.attempts = list(attempts)
        self.configs = []

    def plan(self, cfg, env, run_dir, euid):
        self.configs.append(cfg)
        reports, rc = self.attempts.pop(0)
        return toy_plan(run_dir, reports, rc=rc, np=cfg.np)

    def argv(self, plan):
        return list(plan.argv)

    def files(self, plan):
        return [(plan.hostfile_path, "h slots=1\n")]

    def on_rank_failure(self, plan, job):
        self.calls.append(("failure", job.pid))
        job.end()

    def cleanup(self, pid, returncode):
        self.calls.append(("cleanup", pid, returncode))


def wait_then(predicate, action, timeout=30.0):
    """In a thread: ``action()`` once ``predicate()`` holds (polled), or never."""
    import threading

    def run():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                action()
                return
            time.sleep(0.01)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
