"""Configuration: the option table, the hosts, the MPI, the user's program and
mpirun pieces -> one checked LaunchConfig. Every user error is found here,
before a log dir or any file exists."""
