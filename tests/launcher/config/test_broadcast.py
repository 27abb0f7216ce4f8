"""Tune file: selection by prefix, the portable subset, secrets never on disk (the file itself
is written by rundir.write_atomic: tests/launcher/test_rundir.py)."""
import pytest

from mpilaunch.config import broadcast


def test_select_by_prefix_skips_empty_and_sorts():
    env = {"MA_B": "2", "MA_A": "1", "MA_EMPTY": "", "HOME": "/root", "PATH": "/bin", "PATHX": "y",
           "S3_ENDPOINT": "http://s3", "CREDENTIAL_FILE": "/c", "SCCX": "1", "VC_WORKER_HOSTS": "a,b"}
    assert broadcast.select(env, broadcast.DEFAULT_PREFIXES) == [
        ("CREDENTIAL_FILE", "/c"), ("MA_A", "1"), ("MA_B", "2"), ("PATH", "/bin"), ("PATHX", "y"),
        ("S3_ENDPOINT", "http://s3"), ("SCCX", "1"), ("VC_WORKER_HOSTS", "a,b"),
    ]


def test_split_and_exact_text():
    selected = [
        ("MA_A", "1"), ("MA_SPACE", "a b"), ("MA_SEMI", "a;b"), ("MA_QUOTE", "it's"), ("MA_DQ", 'x"y'),
        ("MA_NL", "a\nb"), ("MA_CR", "a\r"), ("MA_UNI", "héllo"), ("MA_BS", "a\\b"),
        ("MA_DOLLAR", "$HOME=a#b,c"), ("PATH", "/a:/b"), ("MA_LONG", "x" * 2000),
        ("AWS_SECRET_ACCESS_KEY", "abc"), ("MY_TOKEN", "t"), ("CRED_X", "c"), ("MA_SK", "k"),
    ]
    b = broadcast.split(selected)
    assert b.in_file == (("MA_A", "1"), ("MA_DOLLAR", "$HOME=a#b,c"), ("PATH", "/a:/b"))
    assert b.routed == ("MA_SPACE", "MA_SEMI", "MA_QUOTE", "MA_DQ", "MA_NL", "MA_CR", "MA_UNI", "MA_BS",
                        "MA_LONG", "AWS_SECRET_ACCESS_KEY", "MY_TOKEN", "CRED_X", "MA_SK")
    assert broadcast.render(b) == "-x MA_A=1\n-x MA_DOLLAR=$HOME=a#b,c\n-x PATH=/a:/b\n"



@pytest.mark.parametrize("value, portable", [
    ("abc", True), ("a:b,c=d/e@f%g", True), ("~!#$&()*+-.<>?[]^`{|}", True),
    ("", False), ("a b", False), ('a"b', False), ("a'b", False), ("a;b", False), ("a\\b", False),
    ("é", False), ("a\tb", False), ("a\x7f", False),
    ("abc\n", False),   # a pattern's "$" matches before a final newline: the line would end early
])
def test_the_portable_subset_is_printable_ascii_without_space_quotes_semicolon_backslash(value, portable):
    assert broadcast.is_portable("NAME", value) is portable


def test_a_portable_value_still_fits_the_line_prrte_reads():
    assert broadcast.is_portable("N", "x" * (broadcast.MAX_LINE_BYTES - len("-x N=\n")))
    assert not broadcast.is_portable("N", "x" * (broadcast.MAX_LINE_BYTES - len("-x N=\n") + 1))


@pytest.mark.parametrize("name, ok", [("A", True), ("_a1", True), ("MA_X", True), ("1A", False),
                                      ("A-B", False), ("É", False), ("", False), ("A\n", False)])
def test_a_broadcast_name_is_an_ascii_identifier(name, ok):
    assert broadcast.is_name(name) is ok
