"""The live view of a running job: every rank's samples (rank side: ``mpilaunch/rank/monitor.py``),
gathered by the launcher over the control channel (``board.py``), judged for stragglers
(``straggler.py``), shown by ``mpilaunch top`` and served to Prometheus (``metrics.py``)."""
