"""The rank adapter: ``python -m mpilaunch.rank [opts] -- SCRIPT [ARGS]`` runs inside every
process ``mpirun`` starts. See docs/ARCHITECTURE.md for the contract.

identity.py (who am I) -> agree.py (scheduler address/port, node index; MPI only when
needed) -> frameworkenv.py (MS_*/PyTorch env; pure) -> supervisor.py (worker + scheduler
children, logs, teardown). affinity.py (``--bind-core``), logs.py (log names, tails),
status.py (``@@mpilaunch`` lines) serve them; __main__.py wires them together.
"""
