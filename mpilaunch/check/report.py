"""``mpilaunch check``'s output: failures and warnings (capped per check), the per-host table,
and the one summary line. Pure."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from mpilaunch.check.outliers import COLUMNS as DEEP_COLUMNS
from mpilaunch.check.results import CHECKS, FAIL, OK, SKIP, WARN, CheckResult

if TYPE_CHECKING:
    from mpilaunch.check.deep import DeepReport

TABLE_MAX_HOSTS = 40          # beyond this, print failures and the summary only (or --table)
MAX_LINES_PER_CHECK = 20      # failure lines per check kind before "... and N more"


def report_lines(results: Sequence[CheckResult], n_hosts: int, elapsed: float, table: Optional[bool] = None,
                 max_per_check: int = MAX_LINES_PER_CHECK, deep: Optional[DeepReport] = None) -> List[str]:
    """``deep``: the ``--deep`` report (mpilaunch/check/deep.py's DeepReport): its columns
    join the table (figures instead of ok, ``!`` after an outlier's), its notes and verdict
    come before the summary line."""
    lines: List[str] = []
    for status, tag in ((FAIL, "FAIL"), (WARN, "WARN")):
        by_check: Dict[str, List[CheckResult]] = {}
        for r in results:
            if r.status == status:
                by_check.setdefault(r.check, []).append(r)
        for check, rs in by_check.items():
            for r in rs[:max_per_check]:
                lines.append(f"{tag} {r.line()}")
            if len(rs) > max_per_check:
                lines.append(f"{tag} ... and {len(rs) - max_per_check} more host(s) with the same {check} problem")
    if table is None:
        table = n_hosts <= TABLE_MAX_HOSTS
    if table:
        lines += table_lines(results, deep.cells if deep is not None else None)
    if deep is not None:
        lines += list(deep.notes) + [deep.verdict]
    bad_hosts = {r.host for r in results if r.status == FAIL and r.host}
    job_fail = [r for r in results if r.status == FAIL and not r.host]
    warns = sum(1 for r in results if r.status == WARN)
    counts: Dict[str, int] = {}
    for r in results:
        if r.status == FAIL:
            counts[r.check] = counts.get(r.check, 0) + 1
    what = ", ".join(f"{c} {n}" for c, n in counts.items())
    if bad_hosts or job_fail:
        lines.append(f"mpilaunch check: FAILED — {len(bad_hosts)} of {n_hosts} host(s) failed"
                     f"{' and a job-wide check' if job_fail else ''} ({what}); {warns} warning(s); "
                     f"{elapsed:.1f}s")
    else:
        lines.append(f"mpilaunch check: OK — {n_hosts} host(s) passed; {warns} warning(s); {elapsed:.1f}s")
    return lines


def table_lines(results: Sequence[CheckResult], figures: Optional[Dict[str, Dict[str, str]]] = None) -> List[str]:
    """One row per host, one column per check that any host ran; ``figures`` (host -> column
    -> text) gives the deep columns' cells."""
    order: List[str] = []
    cells: Dict[str, Dict[str, str]] = {}
    addr: Dict[str, str] = {}
    for r in results:
        if not r.host:
            continue
        if r.host not in cells:
            order.append(r.host)
            cells[r.host] = {}
        if r.addr:
            addr[r.host] = r.addr
        cells[r.host][r.check] = {OK: "ok", FAIL: "FAIL", WARN: "warn", SKIP: "-"}[r.status]
    if not order:
        return []
    figures = figures or {}
    for h in order:
        for c, text in figures.get(h, {}).items():
            if cells[h].get(c) != "FAIL" or text.endswith("!"):
                cells[h][c] = text
    used = [c for c in CHECKS + DEEP_COLUMNS if any(c in cells[h] for h in order)]
    hw = max(4, *(len(h) for h in order))
    aw = max(7, *(len(addr.get(h, "")) for h in order))
    width = {c: max(len(c), *(len(cells[h].get(c, "-")) for h in order)) for c in used}
    head = f"{'HOST':<{hw}}  {'ADDRESS':<{aw}}  " + "  ".join(f"{c.upper():<{width[c]}}" for c in used).rstrip()
    out = [head]
    for h in order:
        row = f"{h:<{hw}}  {addr.get(h, ''):<{aw}}  "
        row += "  ".join(f"{cells[h].get(c, '-'):<{width[c]}}" for c in used)
        out.append(row.rstrip())
    return out
