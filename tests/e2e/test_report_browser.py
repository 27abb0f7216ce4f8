"""The report in a real browser: a real failing 4-rank job under mpirun, ``mpilaunch report``
on its LOG_DIR, then headless Chromium (Debian's ``chromium``; scripts/test.sh installs it)
renders the page: the DOM it built has one row per rank with the root-cause marker on the
rank that failed, and its screenshot shows the phases' colours, not a blank page. Under CI a
missing browser is a failure, not a skip."""
import os
import shutil
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser

import pytest

from helpers import pngread
from helpers.launch import clean_env, run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("CI"):
    pytest.fail("chromium is not installed (scripts/test.sh installs it)", pytrace=False)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")

WORKER = r'''
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} training", flush=True)
time.sleep(0.3)
if rank == 2:
    print("loss is nan", flush=True)
    sys.exit(5)
time.sleep(60)
'''


def chromium(tmp_path, *args):
    """Headless Chromium with a fresh profile and nothing of its own on the network."""
    profile = tmp_path / "profile"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


class _Rows(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.markers, self.hosts = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "g" and "row" in classes:
            self.rows.append(a)
        elif tag == "polygon" and "root-marker" in classes:
            self.markers.append((a, self.rows[-1] if self.rows else None))
        elif tag == "details":
            self.hosts.append(a)


@pytest.fixture(scope="module")
def failed_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("job")
    (tmp / "w.py").write_text(WORKER)
    logs = tmp / "logs"
    p = run(["-np", "4", "--log_dir", str(logs), "--master_port", "0", str(tmp / "w.py")],
            env=clean_env(), cwd=str(tmp))
    assert p.returncode == 5, p.stderr
    assert p.stderr.rstrip().splitlines()[-1] == f"  timeline: mpilaunch report {logs}"
    r = subprocess.run([sys.executable, "-m", "mpilaunch", "report", str(logs)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return tmp, logs / "report.html"


def test_the_browser_builds_one_row_per_rank_and_marks_the_failed_one(failed_job):
    tmp, page = failed_job
    dom = chromium(tmp, "--dump-dom", page.as_uri())
    parsed = _Rows()
    parsed.feed(dom)
    ranks = [r for r in parsed.rows if "rank" in r["class"].split()]
    assert sorted(int(r["data-rank"]) for r in ranks) == [0, 1, 2, 3]
    assert {r["data-host"] for r in ranks} == {os.uname().nodename}
    assert [r["data-rank"] for r in ranks if r.get("data-root") == "1"] == ["2"]
    [(marker, row)] = parsed.markers
    assert marker["data-root-rank"] == "2" and row["data-rank"] == "2"
    assert "exit status 5" in dom and "loss is nan" in dom


def test_the_screenshot_shows_the_timeline(failed_job):
    tmp, page = failed_job
    shot = tmp / "shot.png"
    chromium(tmp, "--window-size=1200,700", f"--screenshot={shot}", page.as_uri())
    width, height, rows = pngread.read(str(shot))
    assert (width, height) == (1200, 700)
    colours = Counter(px for row in rows for px in row)
    assert colours[(255, 255, 255)] < 0.95 * width * height          # not a blank page
    assert colours[(0x43, 0xa0, 0x47)] > 2000      # worker running, one bar per rank
    assert colours[(0xe5, 0x39, 0x35)] > 500       # the others' teardown
    assert colours[(0xb7, 0x1c, 0x1c)] > 20        # the root-cause marker
