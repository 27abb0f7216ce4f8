"""Prints what a launcher gave this worker, one line on stdout and one on stderr, each marked
with the rank: ``LINE rank=R ...``; ``--fail-first N``: attempt 0 exits N (a job that fails
once: TORCHELASTIC_RESTART_COUNT says the attempt)."""
import os
import sys

env = os.environ
rank = env["RANK"]
args = sys.argv[1:]
print(f"LINE rank={rank} out world={env['WORLD_SIZE']} local={env['LOCAL_RANK']} "
      f"role={env.get('ROLE_NAME')} restart={env.get('TORCHELASTIC_RESTART_COUNT')} args={args}",
      flush=True)
print(f"LINE rank={rank} err", file=sys.stderr, flush=True)
if "--fail-first" in args and env.get("TORCHELASTIC_RESTART_COUNT") == "0":
    sys.exit(int(args[args.index("--fail-first") + 1]))
