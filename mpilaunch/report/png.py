"""The same timeline as a PNG, for terminals and issue trackers. matplotlib is an optional
extra (``pip install 'mpilaunch[report]'``); the HTML report needs nothing."""
from __future__ import annotations

import textwrap
from typing import List, Optional, Tuple

from mpilaunch.errors import UsageError
from mpilaunch.report import model as M
from mpilaunch.report.html import BAR_OF, COLORS, FOLD_HOST_ROWS, FOLD_RANKS


def _rows(att: M.Attempt) -> List[Tuple[str, List[M.Phase], Optional[float]]]:
    """[(label, phases, the root cause's exit time or None)], one per rank process; hosts
    folded as in the HTML report."""
    out: List[Tuple[str, List[M.Phase], Optional[float]]] = []
    if att.starter_start is not None:
        out.append((att.program or "starter", [M.Phase("starter", att.starter_start,
                                                      att.starter_exit or att.end)], None))
    if att.restart is not None and att.restart.spans():   # where the in-place restart's time went
        out.append((f"restart {att.restart.from_attempt} -> {att.index}",
                    [M.Phase(BAR_OF.get(n, n), a, b) for n, a, b in att.restart.spans()], None))
    fold = len(att.rows) > FOLD_RANKS
    for host, rows in att.by_host():
        keep = (not fold or len(rows) <= FOLD_HOST_ROWS or any(r.root for r in rows)
                or host in att.lost_hosts)
        if keep:
            for r in rows:
                label = f"{host} rank {r.rank}" + (" sched" if r.role == "scheduler" else "")
                out.append((label, r.phases, r.exit if r.root else None))
        else:
            phs: List[M.Phase] = []
            for name in M.PHASES:
                mine = [p for r in rows for p in r.phases if p.name == name]
                if mine:
                    phs.append(M.Phase(name, min(p.start for p in mine), max(p.end for p in mine)))
            out.append((f"{host} ({len(rows)} rows)", phs, None))
    return out


def render(job: M.Job, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise UsageError("--png needs matplotlib: pip install 'mpilaunch[report]' (the HTML "
                         "report needs nothing)") from None
    atts = [a for a in job.attempts if a.rows]
    if not atts:
        raise UsageError(f"{job.path}: no rank in the event record: nothing to draw")
    rows = [(a, _rows(a)) for a in atts]
    height = sum(len(r) for _, r in rows) * 0.28 + 1.2 * len(rows) + 0.6
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, max(height, 2.5)), squeeze=False,
                             gridspec_kw={"height_ratios": [max(len(r), 1) for _, r in rows]})
    for ax, (att, rs) in zip(axes[:, 0], rows):
        t0 = job.start if att.index == 0 and job.start is not None else att.start or 0.0
        for i, (label, phases, root_t) in enumerate(rs):
            y = len(rs) - 1 - i
            ax.broken_barh([(p.start - t0, max(p.end - p.start, 1e-4)) for p in phases], (y - 0.35, 0.7),
                           facecolors=[COLORS[p.name] for p in phases])
            if root_t is not None:
                ax.plot([root_t - t0], [y], marker="D", color="#b71c1c", markersize=8)
        ax.set_yticks(range(len(rs)))
        ax.set_yticklabels([label for label, _, _ in reversed(rs)], fontsize=8)
        ax.set_xlabel("seconds since mpilaunch started" if att.index == 0 else
                      f"seconds since attempt {att.index} started")
        what = "succeeded" if att.status == 0 else f"exit status {att.status}: {att.cause}"
        if att.status is None and att.restarted is not None:
            what = f"restarted in place: {att.restarted.cause or '?'}"
        title = f"attempt {att.index}: {what}"
        if att.restart is not None:   # the restart's words, wrapped under the title
            title += "\n" + "\n".join(textwrap.wrap(att.restart.text(len(att.ranks())), 150))
        ax.set_title(title, fontsize=8 if att.restart is not None else 10, loc="left")
        ax.set_xlim(left=0)
        ax.grid(axis="x", color="#eee")
    in_place = any(a.restart is not None for a in atts)
    handles = [Patch(color=COLORS[p], label=M.PHASE_NAMES[p]) for p in M.PHASES
               if p != M.RESTARTING or in_place]
    if in_place:
        handles += [Patch(color=COLORS[BAR_OF.get(p, p)], label=f"restart: {M.RESTART_PHASE_NAMES[p]}")
                    for p in M.RESTART_PHASES]
    fig.legend(handles=handles, loc="upper right", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
