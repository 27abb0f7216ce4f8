"""The rank side's wait share (mpilaunch/rank/monitor.py): a sample in a collective's frame
waits; a sample under a library's synchronising call (DDP's backward, FSDP) waits when the main
thread sleeps on a futex; without the thread's state a large share of those cannot be told."""
import os
import subprocess
import sys
import time

from mpilaunch.rank import monitor

BACKWARD = [("_engine_run_backward", "/v/lib/python3.11/site-packages/torch/autograd/graph.py", 979),
            ("backward", "/v/lib/python3.11/site-packages/torch/autograd/__init__.py", 395),
            ("<module>", "/w/train.py", 26)]
READ = [("read_batch", "/w/train.py", 17), ("<module>", "/w/train.py", 23)]
ALL_REDUCE = [("all_reduce", "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 2900),
              ("<module>", "/w/train.py", 30)]
FSDP = [("wait_for_unshard", "/v/site-packages/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", 300),
        ("<module>", "/w/train.py", 30)]


def test_sync_regions_are_the_libraries_frames_that_wait_in_cpp():
    assert monitor.in_sync_region(BACKWARD) and monitor.in_sync_region(FSDP)
    assert not monitor.in_sync_region(READ)
    # torch.distributed's own collective counts as a collective, not as a sync region
    assert monitor.sync_share([(BACKWARD, 6), (READ, 2), (ALL_REDUCE, 2)]) == 0.6


def test_the_wait_is_bounded_by_the_sync_share_and_the_futex_share():
    # the waiters of the measured DDP job, and its slow reader (docs/MONITOR.md)
    assert monitor.wait_of(0.0, 0.96, 0.84) == 0.84
    assert monitor.wait_of(0.0, 0.14, 0.07) == 0.07
    # a wide model's backward computes: its share under backward is not its wait
    assert monitor.wait_of(0.0, 0.70, 0.30) == 0.3
    # a collective's own futex sleeps are not counted twice
    assert monitor.wait_of(0.5, 0.2, 0.6) == 0.6
    assert monitor.wait_of(0.5, 0.2, 0.3) == 0.5       # mpi4py spins: no futex, the stack tells
    assert monitor.wait_of(0.4, 0.0, None) == 0.4      # nothing in a sync region: as before
    assert monitor.wait_of(0.0, 0.5, None) is None     # cannot tell without the thread's state
    assert monitor.wait_of(0.3, 0.1, None) == 0.3      # too little to matter
    assert monitor.wait_of(None, 0.0, 0.5) is None


def test_the_thread_state_of_a_real_process_asleep_on_a_futex_and_in_a_sleep():
    code = ("import threading, time, sys\n"
            "e = threading.Event()\n"
            "open(sys.argv[1], 'w').close()\n"
            "e.wait() if sys.argv[2] == 'futex' else time.sleep(600)\n")
    states = monitor.States()
    got = {}
    for how in ("futex", "sleep"):
        ready = f"/tmp/mpilaunch-test-states-{os.getpid()}-{how}"
        proc = subprocess.Popen([sys.executable, "-c", code, ready, how], stdin=subprocess.DEVNULL)
        try:
            while not os.path.exists(ready):
                assert proc.poll() is None
                time.sleep(0.02)
            time.sleep(0.2)          # past the file's write, into its wait
            for _ in range(5):
                states.sample(proc.pid)
            got[how] = states.take(proc.pid)
        finally:
            proc.kill()
            proc.wait()
            os.unlink(ready)
    assert got == {"futex": 1.0, "sleep": 0.0}
    assert states.take(12345678) is None


def test_every_adapter_ticks_on_the_wall_clocks_multiples_of_the_interval():
    assert monitor.to_tick(1000.0, 5.0) == 5.0
    assert monitor.to_tick(1001.5, 5.0) == 3.5
    assert monitor.to_tick(1004.9996, 5.0) == 5.0    # at the tick (within 1 ms): the next one
    # two adapters started 2.3 s apart tick at the same instants
    assert 1003.2 + monitor.to_tick(1003.2, 5.0) == 1000.9 + monitor.to_tick(1000.9, 5.0) == 1005.0
