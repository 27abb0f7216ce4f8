"""The rank adapter: ``python -m mpilaunch.rank [opts] -- SCRIPT [ARGS]`` runs inside every
process ``mpirun`` starts. See docs/ARCHITECTURE.md for the contract.

options.py (argv -> validated Options) -> identity.py (who am I) -> agree.py (scheduler
address/port, node index; MPI only when needed; network look-ups) -> plan.py (the children
or the exec: argv, env via frameworkenv.py, log names via logs.py, CPUs via binding/;
pure) -> runner.py (supervise: one supervisor, the resilience and in-place features as hooks)
-> supervisor.py (worker + scheduler children, logs, teardown). status.py writes the
``@@mpilaunch`` lines; __main__.py only does: PDEATHSIG, log directory, agreement, plan,
supervise or exec, errors -> status lines and exit codes.
"""
