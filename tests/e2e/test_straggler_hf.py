"""The Hugging Face Trainer's straggler named (docs/MONITOR.md, "DDP and FSDP"): 2 ranks on gloo
(tests/helpers/train_hf.py: a GPT-2 of two tiny layers from its config, nothing downloaded),
rank 1's Dataset reading each sequence 40 ms slower. The Trainer wraps the model in
DistributedDataParallel (through Accelerate) and calls ``accelerator.backward(loss)``, so its
ranks wait for the gradients' all-reduce as any DDP job does: in C++ under autograd's
``_engine_run_backward``, asleep on a futex, which rank/samples.py counts as waiting; and in the
``all_gather`` of each batch's token count that the Trainer's ``get_batch_samples`` makes every
step, a collective's own frame (docs/MONITOR.md, measured). The launcher names rank 1 with its
reader's frame in ``top --once``, in a ``straggler`` event and in the job's end lines, within 30
s of its steps."""
import os
import re
import socket
import subprocess

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.procs import alive, descendants, wait_for
from helpers.straggler import INTERVAL, Job, jobs, needs_py_spy, records  # noqa: F401 (jobs: a fixture)

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers", "train_hf.py")
HOST = socket.gethostname()
FRAME = r"train\.py:\d+ in Sequences\.__getitem__"


@needs_py_spy
def test_hugging_face_trainers_slow_reader_is_named(tmp_path, jobs):
    pytest.importorskip("transformers")
    with open(SCRIPT, encoding="utf-8") as f:
        source = f.read()
    job = Job(tmp_path, source, slow=1, name="hf", np=2)
    jobs.append(job)
    t0 = job.training_since()
    named = wait_for(lambda: records(job.logs, "straggler") or job.proc.poll() is not None,
                     timeout=20 * INTERVAL)
    top = subprocess.run(mpilaunch_argv("top", "--once", job.logs), env=clean_env(), cwd=REPO,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL) \
        if job.proc.poll() is None else None
    kids = descendants(job.proc.pid)
    rc, err = job.stop()
    assert wait_for(lambda: not alive(kids), 20), alive(kids)
    assert rc == 0, err[-3000:]
    shares = [r["shares"] for r in records(job.logs, "wait_share")]
    assert named and named is not True, f"no straggler named: {shares}\n{err[-3000:]}"
    first = named[0]
    assert (first["rank"], first["host"], first["recovered"]) == (1, HOST, False), (first, shares)
    assert first["others_wait"] >= 0.5 > first["wait_share"], (first, shares)
    assert re.fullmatch(FRAME, first["hot_frame"] or ""), (first, shares)
    assert first["t"] - t0 <= 30 + INTERVAL, (first["t"] - t0, first)
    assert top is not None and top.returncode == 0, top and top.stderr
    lines = top.stdout.splitlines()
    assert lines[0].endswith(f"; straggler: rank 1 on {HOST}"), top.stdout
    rows = {int(line.split()[0]): line for line in lines[2:] if line.split()[:1] != []}
    assert re.search(r"\d+%\s+straggler\s+" + FRAME + "$", rows[1]), top.stdout
    assert "straggler" not in rows[0], top.stdout
    assert re.search(r"^mpilaunch: rank 1 on host \S+ is holding the job back: others wait \d+% of the "
                     r"time for it; its time goes to " + FRAME + "$", err, re.M), err[-3000:]
    assert re.search(r"^mpilaunch: 1 straggler\(s\) seen\n  rank 1 on host \S+: held the job back "
                     r"\d+ s, .*its time went to " + FRAME + "$", err, re.M), err[-3000:]
    assert [r["rank"] for r in records(job.logs, "straggler")] == [1]
