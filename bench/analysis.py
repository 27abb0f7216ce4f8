"""Why a target was missed, and what to change: text for REPORT.md, filled in from the
measured data of the same run (refined by hand from the profiles; see bench/README.md)."""
from __future__ import annotations

from typing import List


def explain(sections: List[dict], meta: dict) -> List[str]:
    misses = [(s, v) for s in sections for v in s.get("verdicts", []) if v.get("met") is False]
    if not misses:
        return []
    out = ["## Misses: why, and what to change", ""]
    for key in dict.fromkeys(s["key"] for s, _ in misses):
        sec = next(s for s in sections if s["key"] == key)
        fn = globals().get(f"_explain_{key}")
        out.append(f"### {sec['title']}")
        out.append("")
        out += fn(sec, meta) if fn else ["See the profile in the section below."]
        out.append("")
    return out
