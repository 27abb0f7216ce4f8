"""What the tests share, in one package (no tests here; conftest.py puts tests/ on sys.path).

    helpers (this file)  REPO, EXAMPLES: the paths every room needs
    mpis.py              the one list of MPI installs: Mpi, OMPI5/OMPI4/MPICH/IMPI, ALL, HYDRA,
                         MPIRUNS (the Open MPI launchers as pytest params)
    ports.py             free_port, port_free
    procs.py             process scans: descendants, alive, wait_gone, kill_all, wait_for, ...
    launch.py            running mpilaunch: clean_env, mpilaunch_argv, run, run_cli
    adapter.py           running the rank adapter alone: the test worker, fake rank envs, status lines
    rankenvs.py          rank environments recorded from real MPI launchers and Slurm
    frameworks.py        MindSpore / PyTorch availability and the example training scripts
    multinode.py         what the multi-host launch tests share: DUMP, BROADCAST, SECRETS
    restart.py           the restartable PyTorch training script (TRAIN)
    scale.py             the scale scenarios (failing worker, lost host, SIGTERM, restart) the
                         scale tests and bench/bench_scale.py share
    fixtures_hosts.py    the namespace test host fixtures (registered by conftest.py)
    hosts/               the namespace test hosts themselves (scripts/testhosts.py runs its CLI)
    slurm/               a real Slurm for the tests, its fixtures and what the Slurm tests share

A test module imports from here, never from another test module
(tests/launcher/test_layout.py holds this).
"""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")
