"""The shared rules (mpilaunch/contract.py): one secret rule, one mask, one validator style."""
import pytest

from mpilaunch import contract
from mpilaunch.errors import UsageError

SECRET_NAMES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "DB_PASSWORD", "CREDENTIALS", "MA_SK",
                "OBS_SK_VALUE", "MY_PRIVATE_KEY", "MA_API_KEY", "S3_ACCESS_KEY", "MA_AUTH", "MA_AK",
                "HF_TOKEN", "DB_PASSWD", "CRED_X", "GPG_PRIVATE", "SIGNING_KEY", "AWS_ACCESS_KEY_ID")
PLAIN_NAMES = ("MA_SKIP", "PATH", "MA_TASK", "MA_NUM_GPUS", "S3_ENDPOINT", "MA_KEYBOARD")


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name):
    assert contract.is_secret(name)
    assert contract.mask_value(name, "x") == "****"


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names(name):
    assert not contract.is_secret(name)
    assert contract.mask_value(name, "x") == "x"


def test_mask_lines_masks_before_cutting_and_every_line_of_a_value():
    env = {"MA_API_KEY": "line-one-secret\nline-two-secret", "AWS_SECRET_ACCESS_KEY": "s3cr3tvalue",
           "HOME": "/root", "MA_SK": "abc"}
    long_line = "x" * 495 + "s3cr3tvalue"
    out = contract.mask_lines(["a line-one-secret", "line-two-secret b", long_line, "/root abc"], env,
                              cut=500)
    assert out == ["a ****", "**** b", "x" * 495 + "****", "/root abc"]
    assert all("s3cr" not in line for line in out)


@pytest.mark.parametrize("value, message", [
    ("x", "NAME='x': not a whole number; give a whole number between 1 and 9"),
    ("0", "NAME='0': out of range; give a whole number between 1 and 9"),
    (" 10 ", "NAME=' 10 ': out of range; give a whole number between 1 and 9"),
    ("", "NAME='': not a whole number; give a whole number between 1 and 9"),
])
def test_whole_messages(value, message):
    with pytest.raises(UsageError) as err:
        contract.whole(value, "NAME", 1, 9)
    assert str(err.value) == message


def test_whole_accepts():
    assert contract.whole(" 7 ", "N", 1) == 7
    assert contract.port("22", "SSHD_PORT") == 22
    assert contract.master_port("0") == 0
    assert contract.seconds("0.5", "--t") == 0.5
    assert contract.seconds("0", "--t", allow_zero=True) == 0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "x"])
def test_seconds_rejects(value):
    with pytest.raises(UsageError) as err:
        contract.seconds(value, "--wait-hosts")
    assert str(err.value).startswith(f"--wait-hosts={value!r}: ")
    assert "give a number of seconds, more than 0" in str(err.value)


def test_tail_spec():
    assert contract.parse_tail_spec("-1") is None
    assert contract.parse_tail_spec("all") is None
    assert contract.parse_tail_spec("none") == frozenset()
    assert contract.parse_tail_spec("3, 0") == frozenset({0, 3})
    assert contract.tail_spec_text(contract.parse_tail_spec("3,0,3")) == "0,3"
    assert contract.tail_spec_text(None) == "-1"
    assert contract.tail_spec_text(frozenset()) == "none"
    with pytest.raises(UsageError):
        contract.parse_tail_spec("1,x")
