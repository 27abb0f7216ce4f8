"""The job as one self-contained HTML page: inline CSS and SVG, no script, no font, nothing
fetched, so it opens from a mail attachment or an air-gapped cluster.

One section per attempt; in it one block per host (a ``<details>``, folded when the job has
many ranks, except the host of the root cause) and one SVG row per rank process with its
phases coloured. Every row carries ``data-rank`` / ``data-host`` / ``data-role`` and the root
cause's row ``data-root="1"`` with a marker, so a browser test can read the page back."""
from __future__ import annotations

import html
from typing import List, Optional, Sequence, Tuple

from mpilaunch.output.exctext import exception_lines, exception_text
from mpilaunch.report import model as M
from mpilaunch.report import waits

WIDTH, LABEL, ROW_H, BAR_H = 1100, 190, 18, 12
PLOT = WIDTH - LABEL - 20
FOLD_RANKS = 32          # more ranks than this: hosts fold ...
FOLD_HOST_ROWS = 4       # ... when they hold more rows than this
COLORS = {M.WAITING: "#b0bec5", M.ADAPTER: "#ffb300", M.RESTARTING: "#8d6e63",
          M.RUNNING: "#43a047", M.TEARDOWN: "#e53935", "preflight": "#7e57c2",
          "launcher": "#546e7a", "starter": "#546e7a",   # mpilaunch's own rows, the starter's
          # an in-place restart's phases (report/restarts.py)
          "detection": "#ab47bc", "stopping": "#ef9a9a", "start": "#ffca28",
          "first_output": "#66bb6a"}
# the restart's phase names as bar classes: "teardown" is already the rows' own phase
BAR_OF = {"teardown": "stopping"}

CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:18px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 6px} h2{font-size:16px;margin:18px 0 6px}
.ok{color:#2e7d32} .bad{color:#c62828} .facts{color:#555;margin:2px 0}
.exception{color:#b71c1c;margin:2px 0}
.legend span{display:inline-block;margin-right:14px} .legend i{display:inline-block;width:14px;
height:10px;margin-right:4px;vertical-align:middle}
details.host,.lane{margin:2px 0;border-left:3px solid #ddd;padding-left:6px}
.lane{border-left-color:transparent}
details.host>summary{cursor:pointer;color:#333} details.host.lost>summary{color:#c62828}
svg text{font:11px system-ui,sans-serif;fill:#333} svg .axis{stroke:#999;stroke-width:1}
svg .grid{stroke:#eee} .root-marker{fill:#b71c1c;stroke:#fff;stroke-width:1}
pre.summary{background:#f6f6f6;border:1px solid #ddd;padding:8px;white-space:pre-wrap}
.slowest{color:#6d4c41}
"""


def _e(text: object) -> str:
    return html.escape("" if text is None else str(text), quote=True)


class Scale:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0 = t0
        self.span = max(t1 - t0, 1e-3)

    def x(self, t: float) -> float:
        return LABEL + PLOT * min(max((t - self.t0) / self.span, 0.0), 1.0)

    def ticks(self) -> List[Tuple[float, float]]:
        step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120,
                                300, 600, 1800, 3600, 7200, 1e9) if self.span / s <= 10)
        n = int(self.span / step) + 1
        return [(i * step, self.x(self.t0 + i * step)) for i in range(n)]


def _fmt(seconds: Optional[float]) -> str:
    return "?" if seconds is None else f"{seconds:.3f} s"


def _bar(scale: Scale, ph: M.Phase, y: float, title: str, cls: str = "ph") -> str:
    x0, x1 = scale.x(ph.start), scale.x(ph.end)
    return (f'<rect class="{cls} {ph.name}" x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1.0):.1f}" '
            f'height="{BAR_H}" fill="{COLORS.get(ph.name, "#999")}"><title>{_e(title)}</title></rect>')


def _row_label(row: M.Row) -> str:
    if row.rank is None:
        return f"? {row.role}"
    return f"rank {row.rank}" + (" scheduler" if row.role == "scheduler" else "")


def _row_svg(scale: Scale, row: M.Row, y: float, t0: float) -> str:
    parts = []
    for ph in row.phases:
        title = (f"{_row_label(row)}: {M.PHASE_NAMES.get(ph.name, ph.name)} "
                 f"{ph.start - t0:.3f}-{ph.end - t0:.3f} s")
        if ph.name == M.RUNNING and row.pid:
            title += f" (pid {row.pid})"
        parts.append(_bar(scale, ph, y + 3, title))
    if row.output is not None:
        x = scale.x(row.output)
        parts.append(f'<line class="first-output" x1="{x:.1f}" x2="{x:.1f}" y1="{y + 1}" '
                     f'y2="{y + ROW_H - 1}" stroke="#1b5e20" stroke-width="2"><title>first output '
                     f'{row.output - t0:.3f} s</title></line>')
    end = row.phases[-1].end if row.phases else None
    if row.root and end is not None:
        x, cy = scale.x(row.exit or end), y + ROW_H / 2
        parts.append(f'<polygon class="root-marker" data-root-rank="{_e(row.rank)}" points="'
                     f'{x:.1f},{cy - 7:.1f} {x + 7:.1f},{cy:.1f} {x:.1f},{cy + 7:.1f} '
                     f'{x - 7:.1f},{cy:.1f}"><title>root cause</title></polygon>')
    how = _how(row)
    skew = "" if row.skew is None else f"; host clock {row.skew:+.3f} s"
    if row.new_worker:
        skew += f"; its new worker: {row.new_worker}"
    label = (f'<text x="4" y="{y + 13}">{_e(_row_label(row))}</text>'
             f'<text x="{LABEL - 6}" y="{y + 13}" text-anchor="end">{_e(how)}</text>')
    cls = "row rank" if row.role != "scheduler" else "row sched"
    root = (' data-root="1"' if row.root else "") + (' data-suspect="1"' if row.suspect else "")
    root += f' data-new-worker="{_e(row.new_worker)}"' if row.new_worker else ""
    return (f'<g class="{cls}" data-rank="{_e(row.rank)}" data-host="{_e(row.host)}" '
            f'data-role="{_e(row.role)}"{root}><title>{_e(_row_label(row))} on '
            f'{_e(row.host)}: {_e(_describe(row))}{_e(skew)}</title>{label}{"".join(parts)}</g>')


def _how(row: M.Row) -> str:
    if row.status is None:
        return "" if row.exit is None else "?"
    if row.signal:
        return f"sig {row.signal}"
    return f"exit {row.status}"


def _describe(row: M.Row) -> str:
    if row.exit is None:
        return "no exit reported" if row.started else "never started"
    what = f"exit status {row.status}"
    if row.by:
        what += f", stopped by {row.by}" if row.by != "itself" else ", by itself"
    if isinstance(row.exception, dict):
        what += f"; {exception_text(row.exception)}"
    if row.log:
        what += f"; log {row.log}"
    return what


def _exception(att: M.Attempt) -> str:
    """The root cause's exception, when its rank found one: the summary's words, then where
    the raising frame is in full (the summary names its file only)."""
    raised = att.root.exception if att.root is not None else None
    if raised is None:
        return ""
    exc = dict(raised.detail)
    where = f" at {raised.where}" if raised.where else ""
    more = "".join(f"<br>{_e(line.strip())}" for line in exception_lines(exc))
    return (f'<p class="exception" data-rank="{_e(att.root.rank if att.root else None)}" '
            f'data-type="{_e(raised.type)}">'
            f'root cause\'s exception: <b>{_e(exception_text(exc))}</b>{_e(where)}{more}</p>')


def _axis(scale: Scale, y: float, t0: float) -> str:
    out = [f'<line class="axis" x1="{LABEL}" x2="{LABEL + PLOT}" y1="{y}" y2="{y}"/>']
    for sec, x in scale.ticks():
        out.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + 4}"/>'
                   f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{sec:g} s</text>')
    return "".join(out)


def _svg(body: str, height: int, cls: str) -> str:
    return (f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
            f'height="{height}" viewBox="0 0 {WIDTH} {height}">{body}</svg>')


def _host_block(att: M.Attempt, scale: Scale, host: str, rows: Sequence[M.Row], t0: float,
                fold: bool) -> str:
    body = "".join(_row_svg(scale, row, i * ROW_H, t0) for i, row in enumerate(rows))
    has_root = any(r.root for r in rows)
    lost = host in att.lost_hosts
    ranks = [r.rank for r in rows if r.role != "scheduler" and r.rank is not None]
    span = f"ranks {min(ranks)}-{max(ranks)}" if len(ranks) > 1 else (
        f"rank {ranks[0]}" if ranks else "no rank")
    skews = [r.skew for r in rows if r.skew is not None]
    skew = f"; clock {max(skews, key=abs):+.3f} s vs the launcher's" if skews else ""
    starts = [r.started for r in rows if r.started is not None]
    ready = (f"; last worker started at {max(starts) - t0:.3f} s" if starts else "")
    opened = "" if fold and len(rows) > FOLD_HOST_ROWS and not has_root and not lost else " open"
    # folded: the host's rows in one bar, inside the summary line that stays visible
    agg = "" if opened else "<br>" + _svg(_aggregate(scale, rows, t0), ROW_H, "aggregate")
    return (f'<details class="host{" lost" if lost else ""}" data-host="{_e(host)}"{opened}>'
            f'<summary>host <b>{_e(host)}</b>{" (lost)" if lost else ""}: {span}'
            f'{_e(ready)}{_e(skew)}{" - root cause here" if has_root else ""}{agg}</summary>'
            f'{_svg(body, len(rows) * ROW_H, "rows")}</details>')


def _aggregate(scale: Scale, rows: Sequence[M.Row], t0: float) -> str:
    """A folded host's rows in one: each phase from its earliest start to its latest end."""
    out = []
    for name in M.PHASES:
        phs = [p for r in rows for p in r.phases if p.name == name]
        if phs:
            ph = M.Phase(name, min(p.start for p in phs), max(p.end for p in phs))
            out.append(_bar(scale, ph, 3, f"{M.PHASE_NAMES[name]} of {len(rows)} rows: "
                            f"{ph.start - t0:.3f}-{ph.end - t0:.3f} s", cls="ph agg"))
    return f'<text x="4" y="13">{len(rows)} rows folded</text>' + "".join(out)


def _launcher_rows(job: M.Job, att: M.Attempt, scale: Scale, t0: float) -> str:
    rows = []
    if att.index == 0 and job.start is not None:
        first = job.preflight_span[0] if job.preflight_span else att.starter_start
        rows.append(("mpilaunch", [M.Phase("launcher", job.start, first or job.start)],
                     "front-end: start-up, options, plan"))
    if att.index == 0 and job.preflight_span and job.preflight_span[1]:
        rows.append(("preflight", [M.Phase("preflight", *job.preflight_span)],
                     f"ssh preflight of {len(job.preflight)} host(s)"))
    if att.starter_start is not None:
        end = att.starter_exit or att.end
        rows.append((att.program or "starter", [M.Phase("starter", att.starter_start, end)],
                     f"pid {att.starter_pid}, exit {att.returncode}"))
    body = []
    for i, (name, phs, title) in enumerate(rows):
        y = i * ROW_H
        body.append(f'<g class="launcher-row" data-name="{_e(name)}"><text x="4" y="{y + 13}">'
                    f'{_e(name)}</text>')
        body += [_bar(scale, ph, y + 3, f"{name}: {title}, {ph.start - t0:.3f}-"
                      f"{ph.end - t0:.3f} s") for ph in phs]
        body.append("</g>")
    if att.teardown_start is not None:
        x = scale.x(att.teardown_start)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{len(rows) * ROW_H}" '
                    f'stroke="#e53935" stroke-dasharray="3,2"><title>teardown started: '
                    f'{_e(att.teardown_reason)}</title></line>')
    return f'<div class="lane">{_svg("".join(body), max(len(rows), 1) * ROW_H, "launcher")}</div>'


def _restart(att: M.Attempt, scale: Scale, t0: float) -> List[str]:
    """The in-place restart that started ``att``: where its time went, in words and as one
    row of its phases one after another (each to its latest rank)."""
    r = att.restart
    if r is None:
        return []
    np = len(att.ranks())
    out = [f'<p class="facts restart" data-from="{r.from_attempt}" data-attempt="{r.attempt}" '
           f'data-total="{_e(r.total)}">{_e(r.text(np))}</p>']
    bars = []
    for name, start, end in r.spans():
        rank = r.latest(name)
        title = (f"{M.RESTART_PHASE_NAMES[name]} {end - start:.3f} s"
                 + (f", its latest rank {rank}" if rank is not None else "")
                 + f": {start - t0:.3f}-{end - t0:.3f} s")
        bars.append(_bar(scale, M.Phase(BAR_OF.get(name, name), start, end), 3, title,
                         cls="restart-phase"))
    if bars:
        body = (f'<g class="launcher-row restart-row" data-name="restart"><text x="4" y="13">'
                f'restart {r.from_attempt} -&gt; {r.attempt}</text>{"".join(bars)}</g>')
        out.append(f'<div class="lane">{_svg(body, ROW_H, "restart")}</div>')
    return out


def _title(att: M.Attempt) -> str:
    if att.status is None and att.restarted is not None:
        return f"attempt {att.index}: restarted in place: {att.restarted.cause or '?'}"
    ok = att.status == 0
    return (f"attempt {att.index}: " + ("succeeded" if ok else
            f"exit status {att.status}: {att.cause}" if att.status is not None else "running"))


def _attempt(job: M.Job, att: M.Attempt) -> str:
    t0 = job.start if att.index == 0 and job.start is not None else (att.start or att.starter_start)
    if t0 is None:
        return ""
    scale = Scale(t0, att.end or t0)
    fold = len(att.rows) > FOLD_RANKS
    ok = att.status == 0
    out = [f'<section class="attempt" data-attempt="{att.index}">',
           f'<h2 class="{"ok" if ok else "bad"}">{_e(_title(att))}</h2>']
    out += _restart(att, scale, t0)
    slow = None if att.in_place else att.slowest()   # in place: the restart's line says it
    if slow:
        r = slow["row"]
        out.append(f'<p class="slowest">slowest to start: <b>rank {_e(r.rank)}</b> on host '
                   f'<b>{_e(r.host)}</b>, its worker started {slow["seconds"]:.3f} s after '
                   f'{_e(att.program)} (median {slow["median"]:.3f} s); slowest host: '
                   f'<b>{_e(slow["host"])}</b> ({slow["host_seconds"]:.3f} s, of '
                   f'{slow["hosts"]} host(s))</p>')
    out += [p for p in (_exception(att),) if p]
    if att.teardown_reason and att.teardown_start is not None:
        out.append(f'<p class="facts">teardown started {att.teardown_start - t0:.3f} s: '
                   f'{_e(att.teardown_reason)}</p>')
    for rec in att.stacks:      # mpilaunch stacks, or the stall's: the odd rank out
        odd = ", ".join(f"rank {r}" for r in rec.get("odd") or [])
        out.append(f'<p class="facts stacks" data-suspects="{_e(odd)}">stacks at '
                   f'{(rec.get("t") or t0) - t0:.3f} s: {"suspect: " + _e(odd) + "; " if odd else ""}'
                   f'{_e(rec.get("verdict"))} ({_e(rec.get("dir"))})</p>')
    out += waits.facts(att, t0)     # the monitor's stragglers, and below every rank's wait share
    out.append(_launcher_rows(job, att, scale, t0))
    out += [_host_block(att, scale, host, rows, t0, fold) for host, rows in att.by_host()]
    out.append(waits.chart(att, scale, t0, LABEL, WIDTH))
    out.append(f'<div class="lane">{_svg(_axis(scale, 2, t0), 22, "axis")}</div>')
    if att.summary:
        out.append(f'<pre class="summary">{_e(att.summary)}</pre>')
    out.append("</section>")
    return "\n".join(out)


def render(job: M.Job) -> str:
    meta, hosts = job.meta, job.hosts or {}
    status = job.status if job.finished else None
    head = ("job running (no final status yet)" if not job.finished else
            "job succeeded (exit status 0)" if status == 0 else f"job failed (exit status {status})")
    facts = [f"{hosts.get('np', '?')} rank(s) on {len(hosts.get('hosts') or [])} host(s) "
             f"({_e(hosts.get('source'))}), started by {_e(hosts.get('backend'))}",
             f"mpilaunch {_e(meta.get('version'))} on {_e(meta.get('host'))}, "
             f"log dir {_e(meta.get('log_dir'))}; {len(job.attempts)} attempt(s)",
             f"event record: {_e(job.path)} (schema {_e(job.schema)})"]
    if job.error:
        facts.append(f"ended by the launcher: {_e(job.error)}")
    in_place = any(a.restart is not None for a in job.attempts)
    legend = "".join(f'<span><i style="background:{COLORS[p]}"></i>{M.PHASE_NAMES[p]}</span>'
                     for p in M.PHASES if p != M.RESTARTING or in_place)
    if in_place:
        legend += "".join(f'<span><i style="background:{COLORS[BAR_OF.get(p, p)]}"></i>restart: '
                          f'{M.RESTART_PHASE_NAMES[p]}</span>' for p in M.RESTART_PHASES)
    legend += ('<span><i style="background:#1b5e20;width:3px"></i>first output</span>'
               '<span><i style="background:#b71c1c"></i>root cause</span>'
               f'<span><i style="background:{COLORS["launcher"]}"></i>launcher / starter</span>')
    body = "\n".join(_attempt(job, att) for att in job.attempts)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<title>mpilaunch report: {_e(meta.get("log_dir"))}</title><style>{CSS}</style>'
            f'</head><body>\n<h1 class="{"ok" if status == 0 else "bad"}" id="status" '
            f'data-status="{_e(status)}">{_e(head)}</h1>\n'
            + "".join(f'<p class="facts">{f}</p>' for f in facts)
            + f'\n<p class="legend">{legend}</p>\n{body}\n</body></html>\n')
