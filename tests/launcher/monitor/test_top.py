"""``mpilaunch top``'s table (mpilaunch/monitor/top.py), exact: what a user reads of each rank."""
import io

from mpilaunch.monitor import top
from mpilaunch.monitor.model import JobView, RankView

MB = 1024 * 1024


def rank(r, host, role="worker", state="running", cpu_pct=99.6, rss=312 * MB, age=1.4, wait=0.64,
         hot="train.py:50 in step", straggler=False, up=True):
    return RankView(r, host, role, state, 10.0, cpu_pct, rss, age, wait, hot, straggler,
                    0.9 if straggler else 0.1, up)


VIEW = JobView(1000.0, 1, 1, 3, 2.0, "py-spy", [
    rank(2, "h3", wait=0.03, age=0.2, cpu_pct=12.0, hot="train.py:41 in load_batch", straggler=True),
    rank(0, "h1"),
    rank(0, "h1", role="scheduler", cpu_pct=None, rss=50 * MB, age=None, wait=None, hot=None),
    rank(1, "h2", state="exited 3", up=False, cpu_pct=0.0, rss=2 * 1024 ** 3 + 300 * MB, age=3725),
])


def test_a_row_per_rank_in_rank_order_and_the_straggler_named():
    assert top.render(VIEW) == (
        "mpilaunch top: 3 ranks, attempt 1, restarts 1, sampled every 2 s; straggler: rank 2 on h3\n"
        "RANK  HOST  ROLE       STATE     CPU%   RSS  OUTPUT  WAIT             WHERE\n"
        "   0  h1    worker     running    100  312M      1s   64%             train.py:50 in step\n"
        "   0  h1    scheduler  running      -   50M       -     -\n"
        "   1  h2    worker     exited 3     0  2.3G   1h02m   64%             train.py:50 in step\n"
        "   2  h3    worker     running     12  312M      0s    3%  straggler  train.py:41 in load_batch\n")


def test_without_a_stack_sampler_the_table_says_why_and_has_no_wait_column_values():
    view = JobView(5.0, 0, 0, 1, 1.0, "none: py-spy is not installed (pip install py-spy)",
                   [rank(0, "node-a", wait=None, hot=None, age=65)])
    assert top.render(view) == (
        "mpilaunch top: 1 rank, attempt 0, restarts 0, sampled every 1 s\n"
        "no wait share: py-spy is not installed (pip install py-spy)\n"
        "RANK  HOST    ROLE    STATE    CPU%   RSS  OUTPUT  WAIT\n"
        "   0  node-a  worker  running   100  312M   1m05s     -\n")


def test_a_running_rank_whose_adapter_is_gone_reads_disconnected():
    view = JobView(5.0, 0, 0, 1, 1.0, "py-spy", [rank(0, "h1", up=False, hot=None)])
    assert "   0  h1    worker  disconnected   100  312M      1s   64%\n" in top.render(view)


def test_a_terminal_too_small_cuts_lines_and_keeps_the_straggler_row():
    view = JobView(1.0, 0, 0, 6, 2.0, "py-spy",
                   [rank(r, f"h{r}", hot=None, straggler=r == 5) for r in range(6)])
    assert top.render(view, width=40, height=6) == (
        "mpilaunch top: 6 ranks, attempt 0, resta\n"
        "RANK  HOST  ROLE    STATE    CPU%   RSS\n"
        "   0  h0    worker  running   100  312M\n"
        "   1  h1    worker  running   100  312M\n"
        "   5  h5    worker  running   100  312M\n"
        "... 3 more rows: the terminal is 6 lines\n")


def test_sizes_and_ages_read_as_htop_prints_them():
    assert [top.size(n) for n in (0, 1023, 1024, 980 * 1024, 9.5 * MB, 312 * MB, 5 * 1024 ** 4)] == \
        ["0", "1023", "1.0K", "980K", "9.5M", "312M", "5.0T"]
    assert [top.age(s) for s in (None, 0, 59.9, 60, 3599, 3600, 7260)] == \
        ["-", "0s", "59s", "1m00s", "59m59s", "1h00m", "2h01m"]


def test_batch_mode_prints_a_table_per_answer_until_the_job_ends(monkeypatch):
    views = iter([VIEW])

    def ask():
        try:
            return next(views)
        except StopIteration:
            raise top.Ended("the job writing to logs has ended (mpilaunch pid 7)") from None

    one = JobView(0.0, 0, 0, 1, 0.0, "", [])
    out = io.StringIO()
    monkeypatch.setattr(top, "REFRESH", 0.0)   # no wait between tables here
    assert top.batch(one, ask, out) == 0
    assert out.getvalue() == (top.render(one) + "\n" + top.render(VIEW)
                              + "mpilaunch: the job writing to logs has ended (mpilaunch pid 7)\n")


def test_a_rank_whose_samples_cannot_tell_reads_cannot_tell_not_zero():
    undecided = RankView(1, "h2", "worker", "running", 10.0, 50.0, 312 * MB, 1.0, None,
                         "train.py:49 in train", False, None, True, "cannot tell")
    view = JobView(5.0, 0, 0, 2, 5.0, "py-spy", [rank(0, "h1", wait=0.0), undecided])
    assert top.render(view) == (
        "mpilaunch top: 2 ranks, attempt 0, restarts 0, sampled every 5 s\n"
        "RANK  HOST  ROLE    STATE    CPU%   RSS  OUTPUT         WAIT  WHERE\n"
        "   0  h1    worker  running   100  312M      1s           0%  train.py:50 in step\n"
        "   1  h2    worker  running    50  312M      1s  cannot tell  train.py:49 in train\n")
