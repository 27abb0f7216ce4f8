from mpilaunch.cli import entry

entry()
