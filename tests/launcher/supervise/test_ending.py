"""One door for an attempt's ending (mpilaunch/supervise/ending.py): the relay (a rank's
failure), the control thread (a dead adapter), the stop-signal handler and Hydra's proxy watch
(a lost host), all at once, end the starter with exactly one SIGTERM: a second makes Open MPI
4.1's mpirun exit and orphan its ranks."""
import os
import signal
import subprocess
import sys
import threading
import time

from mpilaunch.backends.base import Backend
from mpilaunch.output.summary import Collector, Event
from mpilaunch.supervise.attempt import Attempt
from mpilaunch.supervise.ending import Ending
from mpilaunch.supervise.starter import Job
from helpers.procs import wait_for

ROUNDS = 200


class CountingStarter(subprocess.Popen):
    """A real child standing in for the starter; the signals the launcher sends it are counted
    where they are sent (a child counting its own would see two SIGTERMs that arrive together
    as one: a standard signal pending twice is delivered once). It ignores SIGTERM, so that
    one child serves every round."""

    def __init__(self):
        super().__init__([sys.executable, "-c", "import signal, sys\n"
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                          "print('ready', flush=True)\nsys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.sent = []
        self.sent_lock = threading.Lock()

    def send_signal(self, sig):
        with self.sent_lock:
            self.sent.append(sig)
        super().send_signal(sig)


class Ends(Backend):
    """Ends the job at a rank's first failure, as Hydra's backend does (Job.end)."""
    program = "toy"

    def on_rank_failure(self, plan, job):
        job.end()


SUPERVISE = os.path.dirname(sys.modules[Ending.__module__].__file__)


def yielding(frame, event, arg):
    """A trace function that gives the processor away at every line of supervise/: each
    check and the write after it may then be split by another thread (the windows a loaded
    machine opens now and then, opened every time)."""
    if not frame.f_code.co_filename.startswith(SUPERVISE):
        return None
    if event == "line":
        time.sleep(0)
    return yielding


def one_round(proc, backend):
    ending = Ending(backend, Attempt())
    ending.collector = Collector(backend)
    previous = signal.signal(signal.SIGTERM, ending.on_signal)
    threading.settrace(yielding)    # every thread started from here: the stopper too
    ending.start()
    job = Job(proc, ending.collector, "toy", stop=ending.stop)
    ending.attach(job, None)
    failure = Event(1, "h", "worker", "exit", 7, None, "self", None, [], 0.0)
    go = threading.Barrier(4)

    def at_once(fn, *args):
        def run():
            go.wait()
            fn(*args)
        return threading.Thread(target=run)

    paths = [at_once(ending.rank_failed, failure),                  # the stderr relay
             at_once(ending.adapter_died, 0, 4242, "h"),              # the control thread
             at_once(job.host_lost, ["h"], 10.0),                   # Hydra's proxy watch
             at_once(signal.pthread_kill, threading.main_thread().ident, signal.SIGTERM)]
    sys.settrace(yielding)      # the main thread: the handler, and attach above
    try:
        for t in paths:
            t.start()
        for t in paths:
            t.join(10)
        assert wait_for(lambda: ending.stop.signals == 1, 10, 0.001)   # the handler ran
    finally:
        sys.settrace(None)
        threading.settrace(None)
        signal.signal(signal.SIGTERM, previous)
        ending.close()          # the stopper has acted on the signal
        job.cancel()            # the escalation's timer
    return ending


def test_every_way_to_end_an_attempt_at_once_sends_one_sigterm():
    backend = Ends()
    proc = CountingStarter()
    try:
        assert proc.stdout.readline() == "ready\n"
        for n in range(ROUNDS):
            ending = one_round(proc, backend)
            with proc.sent_lock:
                sent, proc.sent = proc.sent, []
            assert sent == [signal.SIGTERM], (n, sent)
            assert ending.stop.first == signal.SIGTERM and ending.job.ended
    finally:
        proc.kill()
        proc.wait()


def test_the_attempts_state_moves_only_forward_and_each_transition_once():
    """stopping.StopState: the starter is asked to end once (Job.ended reads the state), the
    first failure is taken once, the third signal forces; nothing moves back."""
    from mpilaunch.supervise.stopping import Stop, StopState

    stop = StopState()
    job = Job.__new__(Job)      # the state alone: no process behind it
    job.stop = stop
    assert (stop.state, stop.failed, job.ended) == (Stop.RUNNING, False, False)
    assert [stop.take_failure(), stop.take_failure()] == [True, False]
    assert stop.state is Stop.RUNNING and not job.ended     # a failure alone ends nothing
    assert [stop.end(), stop.end()] == [True, False]
    assert stop.state is Stop.ENDING and job.ended
    stop.force()
    assert stop.state is Stop.FORCED and job.ended and not stop.end()
    assert stop.state is Stop.FORCED
    assert [stop.signal_came(signal.SIGINT), stop.signal_came(signal.SIGTERM)] == [1, 2]
    assert stop.first == signal.SIGINT and stop.asked


def test_stop_signals_after_the_starter_was_asked_to_end_send_no_second_sigterm(capsys):
    """A rank's failure ended the starter (Hydra's backend: Job.end); the stop signals that
    follow find the attempt ENDING: no second SIGTERM, and the third forces (SIGKILL)."""
    from mpilaunch.supervise.stopping import Stop

    proc = CountingStarter()
    ending = Ending(Ends(), Attempt())
    job = Job(proc, None, "toy", stop=ending.stop)
    try:
        assert proc.stdout.readline() == "ready\n"
        ending.attach(job, None)
        job.end()                                   # the failure's end
        for n in (1, 2, 3):
            assert ending.stop.signal_came(signal.SIGTERM) == n
            ending.act(signal.SIGTERM)
        assert ending.stop.state is Stop.FORCED
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert proc.sent == [signal.SIGTERM, signal.SIGKILL]
        assert capsys.readouterr().err.splitlines() == [
            "mpilaunch: already stopping; signal again to force",
            "mpilaunch: already stopping; signal again to force",
            "mpilaunch: stopping now (SIGKILL to toy)"]
    finally:
        job.cancel()
        proc.kill()
        proc.wait()
