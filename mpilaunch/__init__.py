"""mpilaunch: run MindSpore 2.x / PyTorch distributed jobs through one ``mpirun`` over a hostfile.

``mpilaunch.launch(script, args=[...], np=4, ...)`` runs a job from Python (mpilaunch/api.py).
The package root stays import-light (every rank imports it): the API is loaded on first use.
"""

__version__ = "0.1.0"

_API = ("launch", "start", "Launch", "Result", "Failure", "Raised", "RootCause", "RankRecord")


def __getattr__(name: str) -> object:
    if name in _API:
        from mpilaunch import api

        return getattr(api, name)
    if name == "UsageError":
        from mpilaunch.errors import UsageError

        return UsageError
    raise AttributeError(f"module 'mpilaunch' has no attribute {name!r}")


def __dir__() -> "list[str]":
    return sorted(list(globals()) + list(_API) + ["UsageError"])
