"""Binding, rank side (``--bind-core``, ``--bind-numa``): affinity.py plans the CPUs (and NUMA
nodes) of each child, numabind.py binds them in the child itself and then execs it. Only a rank
given one of the two flags imports it."""
