"""The straggler rule (mpilaunch/monitor/straggler.py): exact gaps, scores, transitions, texts."""
from mpilaunch.monitor import straggler as S


def test_the_gap_is_the_median_of_the_others_minus_its_own():
    g = S.gaps({0: 0.64, 1: 0.60, 2: 0.02, 3: 0.66})
    assert {r: (x.own, x.others, round(x.gap, 3)) for r, x in g.items()} == {
        0: (0.64, 0.60, -0.04), 1: (0.60, 0.64, 0.04), 2: (0.02, 0.64, 0.62), 3: (0.66, 0.60, -0.06)}


def test_an_even_number_of_others_takes_the_mean_of_the_middle_two():
    g = S.gaps({0: 0.1, 1: 0.2, 2: 0.5})
    assert {r: round(x.others, 3) for r, x in g.items()} == {0: 0.35, 1: 0.3, 2: 0.15}


def test_no_judgement_with_one_rank_or_without_wait_shares():
    assert S.gaps({0: 0.0}) == {}
    assert S.gaps({0: None, 1: None, 2: None}) == {}
    assert S.gaps({0: 0.5, 1: None}) == {}
    assert set(S.gaps({0: 0.5, 1: None, 2: 0.1})) == {0, 2}     # the rank without one: unjudged
    assert S.step([{0: 0.0}], set()) == S.Step({}, (), (), ())


def test_a_rank_slow_from_the_start_is_named_after_persist_rounds_in_a_row():
    slow = {0: 0.64, 1: 0.60, 2: 0.02, 3: 0.66}
    assert S.step([slow, slow], set()).became == ()          # two rounds: a pause, for all it knows
    st = S.step([slow, slow, slow], set())
    assert st.became == (2,) and st.stragglers == (2,) and st.recovered == ()
    assert st.scores[2] == S.Score(0.62, 0.02, 0.64)
    assert st.scores[2].slowdown() == 2.72                 # (1 - 0.02) / (1 - 0.64)
    assert S.Score(0.95, 0.0, 0.99).slowdown() == 20.0     # a busy share of 1%: "20x or more"
    assert S.Score(-0.1, 0.5, 0.4).slowdown() == 1.0       # never under 1


def test_a_rank_not_yet_seen_waiting_is_still_starting_and_not_judged():
    # rank 1 still imports while the others wait in the rendezvous for it
    start = [{0: 0.0, 1: 0.0, 2: 1.0, 3: 0.0}, {0: 0.56, 1: 0.0, 2: 1.0, 3: 1.0}]
    st = S.step(start, set(), reached=set())
    assert st.scores == {2: S.Score(-0.44, 1.0, 0.56)} and st.became == ()
    assert 1 in S.step([start[-1]] * 3, set()).became    # without the start-up rule: named
    # from the round after the first it waits in; the start-up's gaps are not averaged in
    steady = [start[-1], {0: 1.0, 1: 0.78, 2: 0.11, 3: 0.89}]
    st = S.step(steady, set(), reached={2})
    assert st.scores == {0: S.Score(-0.22, 1.0, 0.78), 2: S.Score(0.17, 0.11, 0.89),
                         3: S.Score(-0.11, 0.89, 0.78)}
    assert st.became == ()


def test_the_score_averages_two_rounds_so_one_noisy_round_names_no_one():
    noisy = {0: 0.30, 1: 0.32, 2: 0.0, 3: 0.35}   # one round's gap 0.32
    calm = {0: 0.10, 1: 0.12, 2: 0.09, 3: 0.11}
    st = S.step([calm, noisy], set())
    assert st.scores[2] == S.Score(0.17, 0.0, 0.32) and st.became == ()
    slow = {0: 0.62, 1: 0.6, 2: 0.02, 3: 0.65}
    st = S.step([noisy, slow, slow], set())                    # it keeps on: named
    assert st.became == (2,) and st.scores[2] == S.Score(0.6, 0.02, 0.62)


def test_hysteresis_recovery_below_off_not_below_on():
    slow = {0: 0.6, 1: 0.6, 2: 0.0, 3: 0.6}
    half = {0: 0.2, 1: 0.2, 2: 0.0, 3: 0.2}
    calm = {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.1}
    assert S.step([slow, half], {2}).stragglers == (2,)        # 0.4: still one
    assert S.step([half, half], {2}).stragglers == (2,)        # 0.2 >= OFF
    assert S.step([half, half], set()).became == ()            # 0.2 < ON: not named
    st = S.step([half, calm], {2})                             # 0.1 < OFF: recovered
    assert st.recovered == (2,) and st.stragglers == ()


def test_a_straggler_without_a_share_this_round_keeps_its_state():
    st = S.step([{0: 0.6, 1: 0.6, 2: None, 3: 0.6}], {2})
    assert st.stragglers == (2,) and st.recovered == () and 2 not in st.scores


def test_two_slow_ranks_of_four_are_both_named():
    st = S.step([{0: 0.55, 1: 0.03, 2: 0.01, 3: 0.57}] * 3, set())
    assert st.became == (1, 2)


def test_two_slow_ranks_of_eight_are_both_named():
    waits = {r: 0.6 + 0.01 * r for r in range(8)}
    waits.update({3: 0.02, 6: 0.05})
    assert S.step([waits] * 3, set()).became == (3, 6)


def test_a_pause_in_one_round_or_two_is_not_a_straggler():
    # rank 0 saves a checkpoint for ~4 s while the others wait in a barrier: the rounds that
    # hold it (0 % against 60 %) among rounds of 20 %
    calm = {0: 0.2, 1: 0.2, 2: 0.21, 3: 0.19}
    pause = {0: 0.0, 1: 0.6, 2: 0.6, 3: 0.6}
    assert S.step([calm, calm, pause], set()).became == ()
    assert S.step([calm, pause, pause], set()).became == ()      # across a round's boundary
    assert S.step([pause, calm, pause], set()).became == ()      # every other round: periodic
    assert S.step([pause, pause, pause], set()).became == (0,)   # in every round: a drag


def test_the_lines():
    s = S.Score(0.62, 0.02, 0.64)
    assert S.became_line(2, "h3", s, "train.py:41 in load_batch") == (
        "rank 2 on host h3 is holding the job back: others wait 64% of the time for it; its "
        "time goes to train.py:41 in load_batch")
    assert S.became_line(2, "", s, None) == (
        "rank 2 is holding the job back: others wait 64% of the time for it")
    assert S.recovered_line(2, "h3", S.Score(0.05, 0.1, 0.15)) == (
        "rank 2 on host h3 no longer holds the job back: others wait 15% of the time, it waits 10%")


def test_the_end_of_job_lines():
    a = S.Seen(2, "h3", 0, "train.py:41 in load_batch", 0.64, 2.63, [(100.0, 130.0), (150.0, None)])
    b = S.Seen(1, "", 1, None, 0.4, 1.5, [(10.0, 12.4)])
    assert S.seen_lines([a, b], now=160.0) == [
        "rank 2 on host h3: held the job back 40 s (2 times), others waited up to 64% of the "
        "time for it (the job 2.63x as long, the median of its rounds); its time went to train.py:41 in load_batch",
        "rank 1 (attempt 1): held the job back 2 s, others waited up to 40% of the time for it "
        "(the job 1.5x as long, the median of its rounds)"]


def test_the_end_of_job_slowdown_is_the_median_of_its_rounds_not_one_noisy_one():
    s = S.Seen(2, "h3", 0, None)
    for others, slow in ((0.64, 2.7), (0.99, 20.0), (0.66, 2.9)):
        s.add(others, slow)
    assert (s.others, s.slowdown) == (0.99, 2.9)
