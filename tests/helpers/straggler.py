"""What the straggler tests share (docs/MONITOR.md, "The straggler rule"): a job under mpilaunch
that runs until the test creates its stop file, and the launcher's records in
``LOG_DIR/events.jsonl``. The jobs' scripts take ``OUT_DIR SLOW_RANK`` (-1: balanced), write
``OUT_DIR/training`` once every rank has reached its first step and leave at the step after
``OUT_DIR/stop`` appears."""
import json
import os
import shutil
import subprocess

import pytest

from helpers import REPO, launch, mpis
from helpers.ports import free_port
from helpers.procs import wait_for

INTERVAL = 5        # s: py-spy gives ~29 stack samples a round (the rule judges 20 or more)

needs_py_spy = pytest.mark.skipif(shutil.which("py-spy") is None,
                                  reason="py-spy is a test dependency (setup.cfg): pip install -e '.[test]'")


def records(log_dir, kind):
    """The launcher's ``events.jsonl`` records of ``kind`` so far (complete lines only)."""
    try:
        with open(os.path.join(log_dir, "events.jsonl")) as f:
            recs = [json.loads(line) for line in f if line.endswith("\n")]
    except OSError:
        return []
    return [r for r in recs if r["kind"] == kind]


class Job:
    """The job running under mpilaunch until :meth:`stop`: ``np`` ranks of ``source`` with
    ``--sample-interval interval``, by this interpreter, or by ``mpi``'s (helpers.mpis) with
    its mpirun; ``extra``: more launcher options."""

    def __init__(self, tmp_path, source, slow, name, np=4, mpi=None, extra=(), interval=INTERVAL):
        self.dir = tmp_path / name
        self.dir.mkdir()
        script = self.dir / "train.py"
        script.write_text(source)
        self.logs = str(self.dir / "logs")
        args = ("-np", str(np), "--master_port", str(free_port()), "--sample-interval",
                str(interval), "--log_dir", self.logs, *extra, str(script), str(self.dir), str(slow))
        argv = mpis.mpilaunch_argv(mpi, *args) if mpi is not None else launch.mpilaunch_argv(*args)
        self.proc = subprocess.Popen(argv, env=launch.clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def training_since(self, timeout=240):
        """When the job's steps began (its rank 0 wrote it once every rank had reached one)."""
        path = self.dir / "training"
        assert wait_for(lambda: path.exists() and path.read_text().strip() or self.proc.poll() is not None,
                        timeout=timeout), "the job did not start its steps"
        assert path.exists(), self.stop()[1]
        return float(path.read_text())

    def stop(self):
        (self.dir / "stop").touch()
        out, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def jobs():
    """The tests' jobs, killed if a test left one running."""
    started = []
    yield started
    for job in started:
        job.kill()
