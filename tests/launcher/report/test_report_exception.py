"""The report shows the root cause's exception (mpilaunch/report/html.py): the summary's words,
the raising frame's full path and the error file, escaped; nothing when no rank found one."""
import re
from collections import namedtuple

from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.config.mpi import OMPI5, MpiInfo
from mpilaunch.output import events
from mpilaunch.output.outcome import failures
from mpilaunch.output.summary import Collector, Event
from mpilaunch.report import html, model

Cfg = namedtuple("Cfg", "hosts hosts_source np worker_log_name", defaults=(None,))
LR = namedtuple("LR", "log_dir max_restarts")
Done = namedtuple("Done", "status cause stopped_by failures")
OMPI = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
EXC = {"type": "ValueError", "message": "bad <batch> size 0", "file": "/home/u/train.py",
       "line": 41, "function": "<module>", "source": "error_file",
       "error_file": "/logs/error_1.json"}


class _Backend:
    program, name = "mpirun", "Open MPI 5.0.11"


def page(tmp_path, exc):
    events.start(Cfg((), "test", 2), LR(str(tmp_path), 0), _Backend(), {})
    events.emit("starter_start", program="mpirun", pid=100, argv=["mpirun"])
    c = Collector(OMPI)
    for e in (Event(1, "h2", "worker", "exit", 1, None, "self", "/logs/worker_1.log", ["x"], 2.0,
                    None, None, exc),
              Event(0, "h1", "worker", "exit", 143, 15, "terminated", "/logs/worker_0.log", [], 3.0)):
        c.feed_status(e)
        events.status(e)
    fails = failures(c, 1)
    events.attempt_end(Done(1, fails[0].cause, None, fails), c)
    events.job_end(1, 1)
    return html.render(model.load(str(tmp_path)))


def test_the_root_causes_exception_is_on_the_page(tmp_path):
    text = page(tmp_path, EXC)
    [p] = re.findall(r'<p class="exception" data-rank="1" data-type="ValueError">(.*?)</p>', text)
    assert p == ("root cause's exception: <b>ValueError: bad &lt;batch&gt; size 0 (train.py:41 "
                 "in &lt;module&gt;)</b> at /home/u/train.py:41<br>error file: /logs/error_1.json")
    # the failed rank's row says it too
    assert re.search(r'data-rank="1"[^>]*><title>rank 1 on h2: [^<]*ValueError: bad &lt;batch&gt; '
                     r'size 0 \(train.py:41 in &lt;module&gt;\)', text)


def test_no_exception_no_paragraph(tmp_path):
    assert 'class="exception"' not in page(tmp_path, None)
