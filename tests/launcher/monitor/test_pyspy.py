"""py-spy's one home (mpilaunch/rank/pyspy.py): a dump's frame lines read alike by the verdict
and the source-line annotation, under the one rule for a library frame."""
from mpilaunch.rank import pyspy

DUMP = """Process 4242: python3 train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    read_shard (/work/job/train.py:12)
    Allreduce (/venv/lib/python3.11/site-packages/mpi4py/MPI.pyx:0)
    <module> (/work/job/train.py:30)
    PMPI_Allreduce (libmpi.so.40)
    run (<frozen runpy>:88)
"""


def test_a_dumps_frames_are_read_and_only_the_users_get_their_source_line():
    frames = [pyspy.dump_frame(line) for line in DUMP.splitlines()]
    assert [f for f in frames if f] == [
        ("read_shard", "/work/job/train.py", 12), ("Allreduce", "/venv/lib/python3.11/site-packages/mpi4py/MPI.pyx", 0),
        ("<module>", "/work/job/train.py", 30), ("PMPI_Allreduce", "libmpi.so.40", 0), ("run", "<frozen runpy>", 88)]
    lines = {("/work/job/train.py", 12): "x = load(step)", ("/work/job/train.py", 30): "comm.Allreduce(a, b)"}
    asked = []

    def read(path, line):
        asked.append((path, line))
        return lines.get((path, line), "")

    out = pyspy.annotate(DUMP, read)
    assert out.splitlines()[4:9] == ["    read_shard (/work/job/train.py:12)", "    > x = load(step)",
                                     "    Allreduce (/venv/lib/python3.11/site-packages/mpi4py/MPI.pyx:0)",
                                     "    <module> (/work/job/train.py:30)", "    > comm.Allreduce(a, b)"]
    assert asked == [("/work/job/train.py", 12), ("/work/job/train.py", 30)]
    assert pyspy.annotate(out, lambda p, n: "") == out      # a source line is not a frame


def test_one_rule_for_a_library_frame():
    assert [pyspy.is_library(p) for p in (
        "/work/job/train.py", "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
        "/usr/lib/python3/dist-packages/numpy/core.py", "/usr/lib/python3.11/threading.py",
        "libmpi.so.40", "<frozen runpy>")] == [False, True, True, True, True, True]
