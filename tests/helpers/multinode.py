"""What the multi-host launch tests (tests/multihost/) share: the rank script that dumps
each rank's environment, the values that must arrive byte-exact, and the failure summary."""
import sys

from helpers import EXAMPLES

# The launch tests import examples/compare_params.py inside their tests.
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)

DUMP = """\
import json, os, socket, sys, time
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
out, rank = sys.argv[1], os.environ["RANK"]
env = {k: os.environ[k] for k in os.environ}
with open(os.path.join(out, "rank%s.json" % rank), "w") as fh:
    json.dump({"hostname": socket.gethostname(), "env": env}, fh)
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
"""

# Values that must arrive byte-identical on remote ranks: plain ones travel in the tune
# file, the others (whitespace, quotes, newlines, non-ASCII, long, secrets) in mpirun's env.
BROADCAST = {
    "MA_JOB_NAME": "job-7",
    "MA_SPACES": "a b  c\tend",
    "MA_NEWLINES": "line1\nline2\r\nline3\n",
    "MA_QUOTES": "it's \"q\" $HOME `id` ;|&\\ \\n",
    "MA_UNICODE": "ünï €",
    "MA_LONG": "x" * 3000,
    "S3_ENDPOINT": "http://s3.local:9000/a,b=c",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t/+= with space",
    "CRED_TOKEN": "t0ken-value-42",
    "VC_WORKER_NOTE": "a=b=c#d",
}
SECRETS = ("s3cr3t/+= with space", "t0ken-value-42")


def job_summary(stderr):
    """The summary mpilaunch printed for a failed job (from its first line), or ""."""
    i = stderr.find("mpilaunch: job failed")
    return stderr[i:] if i >= 0 else ""
