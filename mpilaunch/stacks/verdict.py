"""The odd rank out, from every rank's stacks. Pure: text in, text out (docs/HANGS.md).

In synchronous training one stuck rank leaves every other rank blocked in the next collective,
so the culprit is the rank whose stack differs. Each rank's answer (rank/stacks.py: py-spy's
``dump`` of its worker, and rank 0's scheduler, with the source line under each frame of the
user's code) is reduced to one *place*: its worker's main thread is **waiting in a collective**
when one of its frames is one (:data:`TORCH`, :data:`MINDSPORE`, :func:`mpi4py_call`), else
it is at its innermost frame of the user's own code (not the interpreter's library, not a
site-packages package), else at its innermost frame. Ranks are grouped by place; the
scheduler's stacks are kept in the files but never grouped (it always waits elsewhere).

The verdict: one group -> ``all ranks in the same place: ...``; else the waiting group is the
one in a collective (the largest such, else the largest group) and every other rank is named
with its host and frame: ``rank 2 on host X: train.py:41 in load_batch; ranks 0, 1, 3 in
all_reduce (torch.distributed)``.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Dict, List, Optional, Sequence, Tuple

from mpilaunch.rank.collectives import (  # noqa: F401 (the verdict's readers use these names)
    MINDSPORE_DIR, MPI_CALLS, TORCH, TORCH_FILES, Frame, at, collective, collective_of,
    is_library, mpi4py_call, short)
from mpilaunch.rank.pyspy import dump_frame

Place = namedtuple("Place", "key text collective")
Rank = namedtuple("Rank", "rank host place note")



def parse(text: str) -> Dict[str, List[List[Frame]]]:
    """One rank's answer -> {role: [thread's frames, innermost first], main thread first}."""
    out: Dict[str, List[List[Frame]]] = {}
    role, threads, main = None, [], False
    for raw in text.splitlines():
        if raw.startswith("=== "):
            words = raw[4:].split(" ")
            role = words[0]
            out.setdefault(role, [])
            continue
        if role is None:
            continue
        if raw.startswith("Thread "):
            frames: List[Frame] = []
            if '"MainThread"' in raw:
                out[role].insert(0, frames)
            else:
                out[role].append(frames)
            threads = frames
            continue
        if raw.startswith("    > ") and threads:
            last = threads[-1]
            threads[-1] = last._replace(source=raw[6:])
            continue
        frame = dump_frame(raw)
        if frame is not None and out.get(role):
            threads.append(Frame(*frame, ""))
    return out


def place(frames: Sequence[Frame]) -> Optional[Place]:
    """Where one thread is (frames innermost first)."""
    if not frames:
        return None
    name = collective_of(frames)
    if name:
        return Place(("collective", name), name, True)
    mine = next((f for f in frames if not is_library(f.path)), frames[0])
    return Place(("at", mine.path, mine.line, mine.func), at(frames), False)


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip() and not line.startswith("=== "):
            return line.strip()
    return "no answer"


def ranks_of(answers: Dict[int, str], hosts: Dict[int, str]) -> List[Rank]:
    out = []
    for r in sorted(answers):
        threads = parse(answers[r]).get("worker") or []
        where = place(threads[0]) if threads else None
        out.append(Rank(r, hosts.get(r, "?"), where, None if where else first_line(answers[r])))
    return out


def _ranks(rs: Sequence[int]) -> str:
    rs = sorted(rs)
    shown = ", ".join(str(r) for r in rs[:16]) + (f" and {len(rs) - 16} more" if len(rs) > 16 else "")
    return f"rank {shown}" if len(rs) == 1 else f"ranks {shown}"


def verdict(answers: Dict[int, str], hosts: Dict[int, str], missing: Sequence[int] = ()) -> Tuple[str, List[int]]:
    """(the verdict line, the odd ranks) of ``answers`` (rank -> its stacks' text); ``hosts``:
    rank -> host; ``missing``: ranks asked that did not answer."""
    ranks = ranks_of(answers, hosts)
    placed = [r for r in ranks if r.place is not None]
    tail = []
    unread = [r for r in ranks if r.place is None]
    if unread:
        notes = sorted({r.note for r in unread})
        tail.append(f"no stacks from {_ranks([r.rank for r in unread])} ({'; '.join(notes)[:200]})")
    if missing:
        tail.append(f"no answer from {_ranks(missing)}")
    if not placed:
        return "; ".join(tail) or "no stacks", []
    groups: Dict[tuple, List[Rank]] = {}
    for r in placed:
        groups.setdefault(r.place.key, []).append(r)
    if len(groups) == 1:
        only = placed[0].place
        head = "all ranks in the same place: " if not unread and not missing else "every rank read is in the same place: "
        return "; ".join([head + only.text] + tail), []
    waiting = max(groups.values(), key=lambda g: (g[0].place.collective, len(g), -g[0].rank))
    odd = sorted((r for r in placed if r.place.key != waiting[0].place.key), key=lambda r: r.rank)
    parts = []
    if len(odd) > 8:
        parts.append(f"{_ranks([r.rank for r in odd])} elsewhere (first: rank {odd[0].rank} on "
                     f"host {odd[0].host}: {odd[0].place.text})")
    else:
        parts += [f"rank {r.rank} on host {r.host}: {r.place.text}" for r in odd]
    parts.append(f"{_ranks([r.rank for r in waiting])} in {waiting[0].place.text}"
                 if waiting[0].place.collective else
                 f"{_ranks([r.rank for r in waiting])} at {waiting[0].place.text}")
    return "; ".join(parts + tail), [r.rank for r in odd]
