"""What the Slurm job tests (tests/slurm/) share: the rank program, the values that must
arrive byte-exact, and reading what each rank recorded."""
import json
import os

# the program the test jobs run in every rank
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
# values that must arrive byte-exact (routed through mpirun's environment, or srun's)
EXACT = {"MA_PLAIN": "plain-value", "MA_SPACES": "a b  c", "MA_QUOTES": "it's \"q\" ;x\\y",
         "MA_UTF8": "café", "MA_SECRET_KEY": "s3cr3t-value"}


def read_ranks(out, n):
    """What each of ranks 0..n-1 of a job recorded (WORKER writes rank-<r>.json into OUT)."""
    ranks = []
    for r in range(n):
        with open(os.path.join(out, "rank-%d.json" % r)) as f:
            ranks.append(json.load(f))
    return ranks
