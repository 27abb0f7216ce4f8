"""mpilaunch: run MindSpore 2.x / PyTorch distributed jobs through one ``mpirun`` over a hostfile."""

__version__ = "0.1.0"
