"""A hand-written MindSpore launch, the minimum that works (docs/measurements-msrun.md):
one scheduler and N workers as plain subprocesses with MS_ROLE, MS_SCHED_HOST, MS_SCHED_PORT,
MS_WORKER_NUM (+ MS_NODE_ID for a stable rank), logs laid out as msrun does.

    python hand_launch.py --python PY --port P --workers 2 --log_dir D -- SCRIPT [ARGS...]

Exits with the first non-zero child status (0 if all succeeded) once every child is gone.
No supervision: a failing child does not end the others (that is what launchers add).
"""
import argparse
import os
import subprocess
import sys


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--log_dir", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    os.makedirs(a.log_dir, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    base.update(MS_SCHED_HOST="127.0.0.1", MS_SCHED_PORT=str(a.port), MS_WORKER_NUM=str(a.workers))
    procs = []
    roles = [("scheduler", {"MS_ROLE": "MS_SCHED"})] + [
        (f"worker_{i}", {"MS_ROLE": "MS_WORKER", "MS_NODE_ID": str(i)}) for i in range(a.workers)]
    for name, extra in roles:
        with open(os.path.join(a.log_dir, f"{name}.log"), "wb") as log:
            procs.append(subprocess.Popen([a.python, *cmd], env={**base, **extra}, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT))
    rc = 0
    for p in procs:
        r = p.wait()
        if r != 0 and rc == 0:
            rc = r if r > 0 else 128 - r
    return rc


if __name__ == "__main__":
    sys.exit(main())
