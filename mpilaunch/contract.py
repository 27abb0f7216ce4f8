"""The rules launcher and rank side share, each defined once.

Import-light on purpose (only ``os`` and ``re``): every rank imports it before the user's script
starts.

* **Secrets**: which variable names are secret (:func:`is_secret`), the one mask
  (:data:`MASK`), and masking of values in text (:func:`mask_lines`). Used for the tune file,
  the mpirun argv, ``--dry-run``, summaries, log tails and ``mpilaunch job``.
* **Status lines**: the prefix of the adapter -> launcher lines (:data:`STATUS_PREFIX`) and of
  the helper protocols over ssh (:data:`PROBE_PREFIX`, :data:`PEER_PREFIX`).
* **Defaults**: the scheduler / master port (:data:`DEFAULT_MASTER_PORT`), the adapter's kill
  grace (:data:`ADAPTER_KILL_GRACE`) and scheduler grace (:data:`SCHEDULER_GRACE`).
* **The tail spec** (``--tail_worker_log``): :func:`parse_tail_spec`.
* **The error file** a torch worker's ``@record`` writes its exception to
  (``TORCHELASTIC_ERROR_FILE``): :func:`error_file_path`, set by the rank side, read by the
  launcher's summary after a failure.
* **Attempt dirs**: where attempt k of a restarted job logs (:func:`attempt_log_dir`).
* **Programs on PATH**: :func:`which` (``shutil.which`` without shutil, which imports ``bz2``,
  ``lzma`` and ``zlib`` into every launch and every rank: docs/ARCHITECTURE.md, start-up).
* **Value validators** with one message style, ``NAME=value: why; how to fix``
  (:func:`whole`, :func:`seconds`, :func:`port`, :func:`master_port`).
"""
from __future__ import annotations

import os

from mpilaunch.errors import UsageError

TYPE_CHECKING = False   # no typing at run time: every rank imports this module
if TYPE_CHECKING:
    from typing import Iterable, List, Mapping

# --------------------------------------------------------------------------- secrets

# A name is secret when it contains SECRET, TOKEN, PASSWORD/PASSWD, CRED, PRIVATE, ACCESS_KEY,
# API_KEY or AUTH, or ends in KEY, or has AK / SK as a whole _-separated word (MA_SK, OBS_SK_X,
# MA_AK). Deliberately wide: a value wrongly treated as secret still arrives exactly (it travels
# in mpirun's environment instead of the tune file); a secret treated as plain would be on disk.
SECRET_NAME = (r"SECRET|TOKEN|PASSWORD|PASSWD|CRED|PRIVATE|ACCESS_KEY|API_KEY|AUTH"
               r"|(?:^|_)KEY$|(?:^|_)(?:AK|SK)(?:_|$)")
MASK = "****"
# Values shorter than this are not searched for in text (a 1-3 character value would mask
# ordinary words); they are still never written to a file nor put in an argv.
MIN_MASKED_LEN = 4


def is_secret(name: str) -> bool:
    import re   # here: a rank adapter that masks nothing does not pay for re

    return bool(re.search(SECRET_NAME, name, re.IGNORECASE))


def mask_value(name: str, value: str) -> str:
    """``value`` as it may be shown for variable ``name``."""
    return MASK if is_secret(name) else value


def secret_values(env: Mapping[str, str]) -> List[str]:
    """Every text to hide for the secret variables of ``env``: each value and each of its
    lines (a multi-line value printed by a program shows up line by line), longest first."""
    found = set()
    for name, value in env.items():
        if not value or not is_secret(name):
            continue
        for piece in [value] + value.splitlines():
            piece = piece.strip("\r")
            if len(piece) >= MIN_MASKED_LEN:
                found.add(piece)
    return sorted(found, key=len, reverse=True)


def mask_lines(lines: Iterable[str], env: Mapping[str, str], cut: "int | None" = None) -> List[str]:
    """``lines`` with every secret value of ``env`` replaced by :data:`MASK`, masked *before*
    each line is cut to ``cut`` characters (a cut must never leave part of a secret)."""
    values = secret_values(env)
    out = []
    for line in lines:
        for v in values:
            if v in line:
                line = line.replace(v, MASK)
        out.append(line if cut is None else line[:cut])
    return out


# --------------------------------------------------------------------------- status lines

STATUS_PREFIX = "@@mpilaunch "          # adapter -> launcher, one JSON object per line (stderr)
PROBE_PREFIX = "@@mpilaunch-probe "     # `mpilaunch check`'s remote probe -> checker (stdout)
PEER_PREFIX = "@@mpilaunch-peer "       # `mpilaunch job`'s peer relay -> worker-0 (stdout)
# The cause of a status line that only tells where a rank is (adapter up, child started, first
# output, exit 0): the launcher's event record takes it, the failure logic never sees it.
LIFE_CAUSE = "life"
# status-line events the launcher tells apart (restart.py): the in-place coordinator's
# (rank/inplace/coordinate.py) and the one after an adapter's graceful stop (rank/resilience.py)
RESTART_EVENT = "restart-in-place"
GRACE_EVENT = "grace-stop"

# --------------------------------------------------------------------------- defaults

DEFAULT_MASTER_PORT = 8118              # msrun's default scheduler port
DEFAULT_LOG_DIR = "."
DEFAULT_TAIL_SPEC = "-1"
# s a rank adapter gives its children between SIGTERM and SIGKILL when it ends them (after a
# failure, or a stop signal without --term-grace); the launcher waits at least this long for
# adapters still tearing down
ADAPTER_KILL_GRACE = 2.0
# s an adapter's own teardown takes at most: ADAPTER_KILL_GRACE for its children, then 1 s to
# reap them, report and exit. The launcher waits this long for adapters still tearing down
# (supervise/attempt.py) and gives a leftover adapter this long before its SIGKILL
# (supervise/leftovers.py)
ADAPTER_TEARDOWN = ADAPTER_KILL_GRACE + 1.0
# s rank 0's adapter waits for the scheduler after its worker exited 0 (--scheduler-grace)
SCHEDULER_GRACE = 300.0

# --------------------------------------------------------------------------- validators


def _shown(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def whole(value: object, name: str, lo: int, hi: "int | None" = None, fix: str = "") -> int:
    """``value`` as an int in ``[lo, hi]``; else UsageError ``NAME=value: why; fix``."""
    text = str(value).strip()
    try:
        number = int(text, 10)
    except ValueError:
        number = None
    bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
    if number is None:
        why = "not a whole number"
    elif number < lo or (hi is not None and number > hi):
        why = "out of range"
    else:
        return number
    raise UsageError(f"{name}={_shown(value)}: {why}; {fix or 'give a whole number ' + bound}")


def seconds(value: object, name: str, allow_zero: bool = False) -> float:
    """A finite number of seconds, more than 0 (or at least 0 with ``allow_zero``)."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        number = None
    # NaN compares false with everything, so the range test turns it away with the infinities
    if number is not None and float("-inf") < number < float("inf") \
            and (number > 0 or (allow_zero and number == 0)):
        return number
    least = "0 or more" if allow_zero else "more than 0"
    why = "not a number" if number is None else "out of range"
    raise UsageError(f"{name}={_shown(value)}: {why}; give a number of seconds, {least}")


def port(value: object, name: str) -> int:
    """A TCP port 1-65535 (an ssh port, say)."""
    return whole(value, name, 1, 65535, fix="give a port between 1 and 65535")


def master_port(value: object, name: str = "--master_port") -> int:
    """The scheduler / master port: 0 (pick a free one) or 1024-65535."""
    number = whole(value, name, 0, 65535,
                   fix="give 0 (pick a free port) or a port between 1024 and 65535")
    if 0 < number < 1024:
        raise UsageError(f"{name}={number}: a privileged port; "
                         "give 0 (pick a free port) or a port between 1024 and 65535")
    return number


# --------------------------------------------------------------------------- tail spec

def parse_tail_spec(raw: object, name: str = "--tail_worker_log") -> "frozenset[int] | None":
    """``-1``/``all`` -> None (every rank); ``none`` -> empty frozenset; ``"0,3"`` -> {0, 3}."""
    text = str(raw).strip().lower()
    if text in ("-1", "all"):
        return None
    if text == "none":
        return frozenset()
    ranks = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"{name}={_shown(raw)}: not a rank list; "
                             "give -1 (every rank), none, or a comma list of ranks such as 0,3")
        ranks.add(int(part))
    return frozenset(ranks)


def tail_spec_text(spec: "frozenset[int] | None") -> str:
    """The canonical text of a parsed tail spec (what the launcher hands to the ranks)."""
    if spec is None:
        return "-1"
    if not spec:
        return "none"
    return ",".join(str(r) for r in sorted(spec))


# --------------------------------------------------------------------------- error file

def error_file_path(log_dir: str, rank: int) -> str:
    """Where rank ``rank``'s ``TORCHELASTIC_ERROR_FILE`` is: beside its ``worker_<rank>.log``
    in ``log_dir``, the log dir of this attempt (torch's ``@record`` writes the exception there
    as JSON; the launcher reads it once the rank failed)."""
    return os.path.join(log_dir, f"error_{rank}.json")


# --------------------------------------------------------------------------- programs on PATH

def which(name: str, path: "str | None") -> "str | None":
    """``shutil.which(name, path=path)``: ``name`` itself when it holds a directory part, else
    the first executable file of that name in ``path``'s directories (None: ``os.defpath``;
    an empty entry: the working directory); None when there is none."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for d in (path if path is not None else os.defpath).split(os.pathsep):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


# --------------------------------------------------------------------------- attempt dirs

def attempt_log_dir(log_dir: str, k: int) -> str:
    """Attempt ``k``'s log dir in a restarted job's ``log_dir`` (LOG_DIR/attempt<k>): the
    launcher names each attempt's, the adapter that restarts in place the next one's."""
    return os.path.join(log_dir, f"attempt{k}")
