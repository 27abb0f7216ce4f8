"""torchrun's per-worker, output and meaningless flags, read where a launch gives one of them
(config/torchrun.py ``prepare``; a plain launch never loads this module): each checked, refused in
one line where it has no meaning here (why, and what to use), and the adapters' ``--torchrun``
made of those the ranks carry out (rank/plan.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Mapping, Optional

if TYPE_CHECKING:
    from argparse import Namespace

from mpilaunch import contract
from mpilaunch.errors import UsageError

START_METHODS = ("spawn", "fork", "forkserver")
RDZV_CONF_KEYS = ("timeout", "join_timeout", "read_timeout", "last_call_timeout", "close_timeout",
                  "heartbeat_timeout", "keep_alive_interval", "keep_alive_max_attempt", "is_host",
                  "use_libuv", "store_type", "local_addr")


def refuse(args: Namespace, refused: Mapping[str, str]) -> None:
    """The torchrun flags that mean nothing here: one line saying why and what to use."""
    for dest, why in refused.items():
        value = getattr(args, dest, None)
        if value is not None:
            flag = "--" + dest.replace("_", "-")
            raise UsageError(f"{flag}={value!r}: {why}")
    handler = getattr(args, "event_log_handler", None)
    if handler is not None and handler.strip() != "null":
        raise UsageError(f"--event-log-handler={handler!r}: a torch events plugin handler "
                         "mpilaunch does not load; its own record of the job's events is "
                         "LOG_DIR/events.jsonl (docs/EVENTS.md); give null or leave it out")
    method = getattr(args, "start_method", None)
    if method is not None and method.strip() not in START_METHODS:
        raise UsageError(f"--start-method={method!r}: give one of {', '.join(START_METHODS)}")
    if getattr(args, "rdzv_conf", None) is not None:
        rdzv_conf(args.rdzv_conf)


def rdzv_conf(text: str) -> Dict[str, str]:
    """``KEY=VALUE,...`` -> a dict, each key one torch's rendezvous reads and each timeout a
    number; nothing of it changes the launch (one launch starts every rank at once)."""
    out: Dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in RDZV_CONF_KEYS:
            raise UsageError(f"--rdzv-conf={text!r}: {item!r} is not KEY=VALUE with a key of "
                             f"torch's rendezvous ({', '.join(RDZV_CONF_KEYS)})")
        if key.endswith(("timeout", "interval", "attempt")):
            try:
                if float(value) <= 0:
                    raise ValueError(value)
            except ValueError:
                raise UsageError(f"--rdzv-conf={text!r}: {key}={value!r}: give a number > 0") from None
        out[key] = value.strip()
    return out


def stream_spec(value: Optional[str], flag: str) -> Optional[str]:
    """torchrun's ``--redirects`` / ``--tee``: ``N`` (0-3: none, stdout, stderr, both) for
    every local rank, or ``LOCAL_RANK:N,...`` -> the canonical text (``N`` or
    ``L:N,...``, sorted), or None when not given."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if ":" not in text:
        return str(_stream(text, flag, text))
    pairs: Dict[int, int] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        local, colon, n = item.partition(":")
        if not colon:
            raise UsageError(f"{flag}={value!r}: give N (0-3) or LOCAL_RANK:N,... such as 0:1,1:2")
        pairs[contract.whole(local, flag, 0)] = _stream(n, flag, value)
    return ",".join(f"{k}:{v}" for k, v in sorted(pairs.items()))


def _stream(text: str, flag: str, value: str) -> int:
    n = text.strip()
    if n not in ("0", "1", "2", "3"):
        raise UsageError(f"{flag}={value!r}: give 0 (none), 1 (stdout), 2 (stderr), 3 (both), "
                         "or LOCAL_RANK:N,... such as 0:1,1:2")
    return int(n)


def ranks_filter(value: Optional[str]) -> Optional[str]:
    """``--local-ranks-filter 0,1`` -> the canonical ``0,1`` (None: every local rank)."""
    if value is None or not value.strip():
        return None
    ranks = sorted({contract.whole(r, "--local-ranks-filter", 0)
                    for r in value.split(",") if r.strip()})
    if not ranks:
        raise UsageError(f"--local-ranks-filter={value!r}: give local ranks such as 0 or 0,1")
    return ",".join(str(r) for r in ranks)


def signals(value: Optional[str]) -> Optional[str]:
    if value is None or not value.strip():
        return None
    names = [n.strip().upper() for n in value.split(",") if n.strip()]
    import signal as _sig

    bad = [n for n in names if not n.startswith("SIG") or not hasattr(_sig, n)]
    if bad or not names:
        raise UsageError(f"--signals-to-handle={value!r}: {bad[0] if bad else value} is not a "
                         "signal name; give names such as SIGTERM,SIGUSR1")
    return ",".join(names)


def numa_binding(value: Optional[str]) -> Optional[str]:
    """``--numa-binding node`` -> ``True`` for --bind_numa; another mode: refused."""
    if value is None or not value.strip():
        return None
    if value.strip() == "node":
        return "True"
    raise UsageError(f"--numa-binding={value!r}: only node is a binding mpilaunch has (each "
                     "worker's CPUs and memory on its NUMA node: --bind_numa True); for CPUs "
                     "give --bind_core, for other NUMA layouts --bind_numa's JSON")


def term_grace(args: Namespace) -> None:
    """``--shutdown-timeout S`` is ``--term-grace S`` (both given: they must agree)."""
    value = getattr(args, "shutdown_timeout", None)
    if value is None:
        return
    given = getattr(args, "term_grace", None)
    if given is not None and str(given).strip() != str(value).strip():
        raise UsageError(f"--shutdown-timeout={value} and --term-grace={given} disagree; give one")
    args.term_grace = value


def rank_spec(args: Namespace, env: Mapping[str, str], default_role: str) -> Optional[str]:
    """What the ranks do with torchrun's per-worker flags, for the adapters' ``--torchrun``:
    ``role=NAME;signals=LIST;redirects=SPEC;filter=LIST;vlr=1`` (only what was given), or
    None."""
    parts = []
    role = getattr(args, "role", None)
    if role is not None and role.strip() and role.strip() != default_role:
        if any(c in role for c in ";=\n") or not role.strip().isprintable():
            raise UsageError(f"--role={role!r}: give a name without ';', '=' or control characters")
        parts.append(f"role={role.strip()}")
    sig = signals(getattr(args, "signals_to_handle", None))
    if sig is not None:
        parts.append(f"signals={sig}")
    stream_spec(getattr(args, "tee", None), "--tee")      # checked: every stream is teed here
    red = stream_spec(getattr(args, "redirects", None), "--redirects")
    if red is not None and red != "0":
        parts.append(f"redirects={red}")
    keep = ranks_filter(getattr(args, "local_ranks_filter", None))
    if keep is not None:
        parts.append(f"filter={keep}")
    if getattr(args, "virtual_local_rank", False):
        parts.append("vlr=1")
    return ";".join(parts) or None
