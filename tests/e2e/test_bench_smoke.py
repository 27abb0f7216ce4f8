"""The benchmark suite must not rot: ``bench/run.py --smoke`` (tiny sizes, 1 run each, the
MindSpore baselines skipped, MindSpore parts skipped entirely without the venv) runs in
under 90 s and writes a report with every section. The figures themselves are not checked
here (a smoke run on a CI machine measures nothing meaningful)."""
import json
import os
import subprocess
import sys
import time

from helpers import REPO

RUN = os.path.join(REPO, "bench", "run.py")

SECTION_TITLES = [
    "## 1. Launch overhead",
    "## 2. MindSpore cluster start",
    "## 3. Failure teardown",
    "## 4. Planning at scale",
    "## 5. Log relay",
    "## 6. Per-rank CPU cost",
]


def test_bench_smoke_writes_full_report(tmp_path):
    out = tmp_path / "report"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, RUN, "--smoke", "--out", str(out)], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert took < 90, f"smoke run took {took:.0f} s (limit 90 s)\n{proc.stdout[-2000:]}"

    report = (out / "REPORT.md").read_text()
    for title in SECTION_TITLES:
        assert title in report, f"{title!r} missing from REPORT.md"
    assert "## Summary: every figure against its target" in report
    assert "**Command**: `python3 bench/run.py --smoke" in report
    assert "**Machine**:" in report and "cores" in report
    assert "section failed" not in report, report
    # the scale section is registered: in a smoke run it only says why it measured nothing
    assert "## 9. Scale: launch time against hosts" in report
    assert "Skipped: smoke run" in report.split("## 9. Scale", 1)[1]

    results = json.loads((out / "results.json").read_text())
    keys = [s["key"] for s in results["sections"]]
    assert keys[:6] == ["launch", "msstart", "teardown", "plan", "relay", "cpu"]   # then hydra, multihost, ...
    for s in results["sections"]:
        assert s["verdicts"], f"section {s['key']} has no figure"
        assert not s.get("error"), s.get("error")
    # sections that never need MindSpore must have measured something
    for s in results["sections"]:
        if s["key"] in ("launch", "plan", "relay", "cpu"):
            assert s["tables"] and s["tables"][0]["rows"], s["key"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        assert (out / "chart.png").stat().st_size > 10_000
