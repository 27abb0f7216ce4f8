"""Render the suite's results: REPORT.md (markdown tables) and chart.png (matplotlib, optional)."""
from __future__ import annotations

import math
import os
import sys
from typing import List, Optional


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _table(columns: List[str], rows: List[list]) -> List[str]:
    out = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _met(m: Optional[bool], info: Optional[bool] = None) -> str:
    if m is None and info is not None:
        return "informational: " + ("within" if info else "above") + " the figure"
    return {True: "**met**", False: "**MISSED**", None: "n/a"}[m]


def render_markdown(meta: dict, sections: List[dict], analysis: List[str], chart_name: Optional[str]) -> str:
    L: List[str] = []
    L.append("# mpilaunch benchmark report")
    L.append("")
    L.append(f"- **Date**: {meta['date']} ({meta['duration_s']:.0f} s for the whole suite)")
    m = meta["machine"]
    L.append(f"- **Machine**: {m['hostname']}, {m['cores']} cores ({m['usable_cores']} usable), {m['cpu_model']}, "
             f"{m['memory']} RAM, {m['os']}, kernel {m['kernel']}")
    waited = (f"after waiting {meta['settled_s']:g} s for the 1-minute load to settle below half the cores, "
              if meta.get("settled_s") else "")
    L.append(f"- **Load average** (1/5/15 min): at start {meta['load_start']} ({waited}before the suite's own "
             f"processes), at end {meta['load_end']} (the suite's own: its last sections run mpirun, ssh and sshd "
             "back to back); per section below. " + (
                 "**The machine was shared with other jobs while this ran: treat spreads as partly load noise.**"
                 if meta.get("loaded") else "Quiet at the start: nothing else was running."))
    L.append(f"- **Command**: `{meta['command']}` (from the repository root)")
    if meta.get("source_changed"):
        L.append(f"- **Warning**: {meta['source_changed']}. Sections measured before and after the change "
                 "measured different code; re-run for consistent figures.")
    L.append(f"- **Mode**: {'SMOKE (tiny sizes, 1 run, figures meaningless)' if meta['smoke'] else 'full'}; "
             f"{meta['runs']} measured run(s) per variant, interleaved; warm-up: {meta['warmup']}")
    L.append(f"- **Software**: mpilaunch at {meta['commit']}; Python {m['python']} (`{m['python_path']}`); "
             + "; ".join(f"{k}: {v}" for k, v in meta["versions"].items() if v))
    env = meta.get("environment")
    if env:
        ps = env.get("python_start", {})
        L.append(f"- **Interpreter start-up on this machine** (median CPU): "
                 + ", ".join(f"`{k}` {v['cpu'] * 1e3:.0f} ms" for k, v in ps.items())
                 + (f". Site-packages .pth files that run code at every start and are not part of a normal "
                    f"install: {', '.join('`' + os.path.basename(p) + '`' for p in env['skipped_pth'])}; section 1 "
                    f"is also measured with a clean-site interpreter that skips them (`{env['clean_python']}`)."
                    if env.get("skipped_pth") else ""))
        L.append(f"- **Bytecode**: {env['bytecode']}.")
    L.append("")
    L.append("## Summary: every figure against its target")
    L.append("")
    rows = []
    for s in sections:
        for v in s.get("verdicts", []):
            rows.append([s["title"].split(" ", 1)[0].rstrip("."), v["figure"], v["value"], v["target"],
                         _met(v["met"], v.get("informational_met"))])
    L += _table(["#", "figure", "measured", "target", "verdict"], rows)
    L.append("")
    if chart_name:
        L.append(f"![chart]({chart_name})")
        L.append("")
    if analysis:
        L += analysis
        L.append("")
    for s in sections:
        L.append(f"## {s['title']}")
        L.append("")
        if s.get("load"):
            L.append(f"Load average during this section: {s['load'][0]} -> {s['load'][1]}; took {s.get('duration_s', 0):.0f} s.")
            L.append("")
        for note in s.get("notes", []):
            L.append(note)
            L.append("")
        if s.get("method"):
            L.append("**Method.** " + " ".join(s["method"]))
            L.append("")
        for t in s.get("tables", []):
            L.append(f"*{t['title']}*")
            L.append("")
            L += _table(t["columns"], t["rows"])
            L.append("")
        if s.get("commands"):
            L.append("<details><summary>Exact command lines</summary>")
            L.append("")
            for group, cmds in s["commands"].items():
                L.append(f"{group}:")
                L.append("")
                for name, argv in cmds.items():
                    L.append(f"- {name}: `{' '.join(argv)}`")
                L.append("")
            L.append("</details>")
            L.append("")
        if s.get("verdicts"):
            L += _table(["figure", "measured", "target", "verdict"],
                        [[v["figure"], v["value"], v["target"], _met(v["met"], v.get("informational_met"))]
                         for v in s["verdicts"]])
            L.append("")
        if s.get("profile"):
            L.append("**Profile.**")
            L.append("")
            L += s["profile"]
            L.append("")
        if s.get("error"):
            L.append(f"**This section failed:** `{s['error']}`")
            L.append("")
    return "\n".join(L) + "\n"


def render_chart(sections: List[dict], path: str, title: str) -> Optional[str]:
    """One panel per section with a chart; bars = medians, error bars = min..max."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print(f"chart.png not drawn: {exc}", file=sys.stderr)
        return None
    panels = [s for s in sections if s.get("chart")]
    if not panels:
        return None
    n = len(panels)
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(8 * cols, 4.6 * rows), squeeze=False)
    for ax, s in zip([a for row in axes for a in row], panels):
        ch = s["chart"]
        groups, series = ch["groups"], ch["series"]
        names = [k for k, v in series.items() if any(x is not None for x in v)]
        width = 0.8 / max(1, len(names))
        horizontal = ch.get("horizontal")
        if horizontal:  # one bar per group, series side by side
            for i, name in enumerate(names):
                vals = series[name]
                ys = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
                med = [v[0] if v else 0 for v in vals]
                lo = [v[0] - v[1] if v else 0 for v in vals]
                hi = [v[2] - v[0] if v else 0 for v in vals]
                ax.barh(ys, med, height=width, xerr=[lo, hi], capsize=3, label=name)
            ax.set_yticks(range(len(groups)))
            ax.set_yticklabels(groups, fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel(ch["unit"])
        else:
            for i, name in enumerate(names):
                vals = series[name]
                xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
                med = [v[0] if v else 0 for v in vals]
                lo = [v[0] - v[1] if v else 0 for v in vals]
                hi = [v[2] - v[0] if v else 0 for v in vals]
                ax.bar(xs, med, width=width, yerr=[lo, hi], capsize=3, label=name)
            ax.set_xticks(range(len(groups)))
            labels = [g.replace(" N=", "\nN=") if len(groups) > 4 else g for g in groups]
            ax.set_xticklabels(labels, fontsize=7 if len(groups) <= 8 else 6)
            ax.set_ylabel(ch["unit"])
            if ch.get("log"):
                ax.set_yscale("log")
        ax.set_title(ch["title"], fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(axis="x" if horizontal else "y", alpha=0.3)
    for ax in [a for row in axes for a in row][n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)
