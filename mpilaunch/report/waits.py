"""Every rank's wait share over one attempt, as an SVG chart on the report's time axis: one line
per rank (the share of its stack samples spent waiting in a collective, each round the monitor
recorded: ``wait_share`` records), the stragglers' lines red, each straggler's span shaded from
the record that named it to the one that said it recovered (docs/MONITOR.md). Read back by a
browser test through ``data-rank`` / ``data-straggler`` on each line and ``data-rank`` on each
span."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from mpilaunch.report.model import Attempt

HEIGHT, TOP, BOTTOM = 120, 8, 8
CALM, SLOW, SPAN = "#90a4ae", "#c62828", "#ffcdd2"


def _e(text: object) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def spans(att: Attempt, end: float) -> List[Tuple[int, float, float, dict]]:
    """(rank, start, end, the record that named it) of every straggler span of ``att``."""
    out: List[Tuple[int, float, float, dict]] = []
    open_: Dict[int, dict] = {}
    for rec in att.stragglers:
        rank = rec.get("rank")
        if not isinstance(rank, int):   # a record without its rank names no line
            continue
        if not rec.get("recovered"):
            open_.setdefault(rank, rec)
        elif rank in open_:
            first = open_.pop(rank)
            out.append((rank, first["t"], rec["t"], first))
    out += [(rank, rec["t"], end, rec) for rank, rec in open_.items()]
    return sorted(out, key=lambda s: (s[1], s[0]))


def chart(att: Attempt, scale: Any, t0: float, label: int, width: int) -> str:
    """The attempt's chart (a ``<div>``), or '' when the monitor recorded no wait share."""
    if not att.waits:
        return ""
    def y(share: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - share)

    named = {r for r, *_ in spans(att, att.end or t0)}
    body = [f'<text x="4" y="{TOP + 10}">wait share</text>']
    for share in (0.0, 0.5, 1.0):
        body.append(f'<line class="grid" x1="{label}" x2="{width - 20}" y1="{y(share):.1f}" '
                    f'y2="{y(share):.1f}"/><text x="{label - 6}" y="{y(share) + 4:.1f}" '
                    f'text-anchor="end">{share * 100:.0f}%</text>')
    for rank, start, stop, rec in spans(att, att.end or t0):
        x0, x1 = scale.x(start), scale.x(stop)
        body.append(f'<rect class="straggler-span" data-rank="{_e(rank)}" x="{x0:.1f}" y="{TOP}" '
                    f'width="{max(x1 - x0, 2.0):.1f}" height="{HEIGHT - TOP - BOTTOM}" '
                    f'fill="{SPAN}" opacity="0.6"><title>rank {_e(rank)} on host '
                    f'{_e(rec.get("host"))} held the job back from {start - t0:.1f} s to '
                    f'{stop - t0:.1f} s: others waited {_pct(rec.get("others_wait"))} of the time '
                    f'for it</title></rect>')
    for rank, points in sorted(_lines(att).items()):
        slow = rank in named
        pts = " ".join(f"{scale.x(t):.1f},{y(w):.1f}" for t, w in points)
        body.append(f'<polyline class="wait-line" data-rank="{rank}" data-straggler='
                    f'"{1 if slow else 0}" points="{pts}" fill="none" stroke='
                    f'"{SLOW if slow else CALM}" stroke-width="{2 if slow else 1}"><title>rank '
                    f'{rank}{" (straggler)" if slow else ""}</title></polyline>')
    svg = (f'<svg class="waits" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
           f'viewBox="0 0 {width} {HEIGHT}">{"".join(body)}</svg>')
    return f'<div class="lane">{svg}</div>'


def _lines(att: Attempt) -> Dict[int, List[Tuple[float, float]]]:
    out: Dict[int, List[Tuple[float, float]]] = {}
    for t, shares in att.waits:
        for rank, share in enumerate(shares):
            if share is not None and t is not None:
                out.setdefault(rank, []).append((t, share))
    return out


def facts(att: Attempt, t0: float) -> List[str]:
    """One ``<p>`` per straggler span: who, when, how much the others waited, its hot frame."""
    out = []
    for rank, start, stop, rec in spans(att, att.end or t0):
        hot = rec.get("hot_frame")
        out.append(f'<p class="facts straggler" data-rank="{_e(rank)}">straggler: <b>rank '
                   f'{_e(rank)}</b> on host <b>{_e(rec.get("host"))}</b> from {start - t0:.1f} s to '
                   f'{stop - t0:.1f} s: others waited {_pct(rec.get("others_wait"))} of the time '
                   f'for it (the job {_e(rec.get("slowdown"))}x as long)'
                   + (f"; its time went to {_e(hot)}" if hot else "") + "</p>")
    return out


def _pct(share: Optional[float]) -> str:
    return "?" if share is None else f"{round(share * 100)}%"
