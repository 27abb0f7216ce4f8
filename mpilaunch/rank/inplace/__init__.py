"""In-place restarts, rank side (``--in-place PORT``): loop.py runs the attempts in one adapter,
coordinate.py coordinates the adapters without MPI, prestart.py starts the next attempt's spare
worker (spare.py is what that interpreter runs). Only a rank given ``--in-place`` imports it."""
