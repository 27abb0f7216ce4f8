"""Where an in-place restart's time went (mpilaunch/attempts/phases.py): the ranks' lifecycle
lines in, the phases and the attempt line's words out, exactly."""
from collections import namedtuple

from mpilaunch.attempts.phases import RestartPhases, note, with_note
from mpilaunch.supervise.attempt import AttemptRecord

Ev = namedtuple("Ev", "rank t role event code")


def _feed(ph, lines):
    got = [ph.feed(Ev(r, t, "worker", e, c)) for r, t, e, c in lines]
    return [g for g in got if g is not None]


def test_the_phases_end_at_the_latest_rank_once_every_rank_wrote_output():
    ph = RestartPhases(2)
    assert _feed(ph, [(0, 9.0, "started", None), (0, 9.5, "output", None)]) == []  # attempt 0
    assert _feed(ph, [(1, 10.05, "restart", 1), (0, 10.06, "restart", 1),
                      (1, 10.10, "stopped", 1), (1, 10.11, "spare-ready", None),
                      (0, 10.20, "stopped", 1), (0, 10.21, "spare-busy", None),
                      (1, 10.12, "started", None), (0, 10.25, "started", None),
                      (1, 10.90, "output", None)]) == []
    assert ph.failure(1, 10.0) is None       # rank 0 has not written yet
    got = _feed(ph, [(0, 11.0, "output", None)])
    assert got == [{"attempt": 1, "total": 1.0, "phases": {
        "detection": 0.06, "teardown": 0.14, "start": 0.05, "first_output": 0.75},
        "spare": {"ready": 1, "busy": 1}}]
    assert note(got[0], 2) == (" in 1.00 s (detection 0.06, teardown 0.14, start 0.05, to "
                               "first output 0.75; a spare on 1 of 2 ranks)")
    assert _feed(ph, [(0, 12.0, "output", None)]) == [] and ph.unfinished() == []   # once


def test_a_quiet_restart_is_timed_up_to_its_start_at_the_attempt_end():
    ph = RestartPhases(1)
    assert _feed(ph, [(0, 5.1, "restart", 3), (0, 5.3, "stopped", 3), (0, 5.4, "started", None)]) == []
    assert ph.failure(3, 5.0) is None
    got = ph.unfinished()
    assert got == [{"attempt": 3, "total": 0.4, "phases": {
        "detection": 0.1, "teardown": 0.2, "start": 0.1, "first_output": None},
        "spare": {"none": 1}}]
    recs = [AttemptRecord(2, 137, "rank 0: killed", note="; restarted in place")]
    assert with_note(recs, got[0], 1)[0].note == (
        "; restarted in place in 0.40 s (detection 0.10, teardown 0.20, start 0.10, no output "
        "from every rank; a spare on 0 of 1 ranks)")
