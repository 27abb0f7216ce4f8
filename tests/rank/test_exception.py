"""The exception a failed worker died of (mpilaunch/rank/exception.py): exact results from real
tracebacks (each written by a real Python, and torch's own @record for the error file), which
source wins, and what reaches the status line."""
import json
import os
import subprocess
import sys
import time

import pytest

from mpilaunch import contract
from mpilaunch.output.summary import parse_status_line
from mpilaunch.rank import exception, logs
from mpilaunch.rank.status import status_line


def run_py(tmp_path, name, source, env=None):
    """Run ``source`` as ``tmp_path/name`` with a real python; -> (its path, its output lines)."""
    script = tmp_path / name
    script.write_text(source)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, **(env or {})), timeout=120)
    assert proc.returncode != 0, proc.stdout
    return str(script), proc.stdout.splitlines()


def exc(kind, message, file, line, function, source="log", **more):
    return dict({"type": kind, "message": message, "file": file, "line": line,
                 "function": function, "source": source}, **more)


def test_a_plain_traceback_names_the_raising_frame(tmp_path):
    path, lines = run_py(tmp_path, "train.py", (
        "def load_batch(n):\n"
        "    raise ValueError(f'bad batch size {n}')\n"
        "print('epoch 0', flush=True)\n"
        "load_batch(0)\n"))
    assert lines[0] == "epoch 0"
    assert exception.from_log(lines) == exc("ValueError", "bad batch size 0", path, 2, "load_batch")


def test_a_chain_names_the_last_exception_and_keeps_the_first(tmp_path):
    path, lines = run_py(tmp_path, "chain.py", (
        "def load(d):\n"
        "    return d['x']\n"
        "def get():\n"
        "    try:\n"
        "        load({})\n"
        "    except KeyError as e:\n"
        "        raise RuntimeError('loading failed') from e\n"
        "def step():\n"
        "    try:\n"
        "        get()\n"
        "    except RuntimeError:\n"
        "        undefined_name\n"
        "step()\n"))
    assert "The above exception was the direct cause of the following exception:" in lines
    assert exception.from_log(lines) == exc(
        "NameError", "name 'undefined_name' is not defined", path, 12, "step",
        first={"type": "KeyError", "message": "'x'", "file": path, "line": 2,
               "function": "load", "link": "cause"})


def test_during_handling_is_a_context_link(tmp_path):
    path, lines = run_py(tmp_path, "ctx.py", (
        "try:\n"
        "    {}['k']\n"
        "except KeyError:\n"
        "    raise OSError('cleanup failed')\n"))
    assert exception.from_log(lines) == exc(
        "OSError", "cleanup failed", path, 4, "<module>",
        first={"type": "KeyError", "message": "'k'", "file": path, "line": 2,
               "function": "<module>", "link": "context"})


def test_a_syntax_error_of_the_script_has_no_function(tmp_path):
    path, lines = run_py(tmp_path, "bad.py", "x = 1\nx = = 2\n")
    assert not any(line.startswith("Traceback") for line in lines)   # Python prints no header
    assert exception.from_log(lines) == exc("SyntaxError", "invalid syntax", path, 2, None)


def test_a_syntax_error_of_an_imported_module(tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    _, lines = run_py(tmp_path, "main.py", "import broken\n")
    found = exception.from_log(lines)
    assert (found["type"], found["file"], found["line"], found["function"]) == (
        "SyntaxError", str(tmp_path / "broken.py"), 1, None)


def test_a_multi_line_message_in_a_log_keeps_its_first_line(tmp_path):
    path, lines = run_py(tmp_path, "multi.py", "raise ValueError('line one\\nline two')\n")
    assert lines[-2:] == ["ValueError: line one", "line two"]
    assert exception.from_log(lines) == exc("ValueError", "line one", path, 1, "<module>")


def test_other_threads_atexit_and_caught_tracebacks_are_not_the_cause(tmp_path):
    """A traceback logged and caught before the fatal one, a thread's, an atexit handler's and
    a lot of output after it: the main thread's uncaught exception is named."""
    path, lines = run_py(tmp_path, "noisy.py", (
        "import atexit, logging, sys, threading\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    logging.exception('caught, going on')\n"
        "def later():\n"
        "    raise OSError('from atexit')\n"
        "def chatter():\n"
        "    for i in range(3000):\n"
        "        print('thread line', i)\n"
        "atexit.register(later)\n"
        "atexit.register(chatter)\n"
        "t = threading.Thread(target=lambda: {}['thread'])\n"
        "t.start(); t.join()\n"
        "def train():\n"
        "    raise ValueError('bad batch size 0')\n"
        "train()\n"))
    assert lines[-1] == "OSError: from atexit" and len(lines) > 3000
    assert exception.from_log(lines) == exc("ValueError", "bad batch size 0", path, 16, "train")


def test_a_child_process_and_a_logging_error_after_it_are_not_the_cause(tmp_path):
    """What multiprocessing's child and logging's handleError print, with a real Python, after
    the main thread's exception (from an atexit handler, as a worker outliving it would)."""
    path, lines = run_py(tmp_path, "mp.py", (
        "import atexit, logging, multiprocessing, sys\n"
        "def work():\n"
        "    raise OSError('worker broke')\n"
        "def after():\n"
        "    p = multiprocessing.get_context('fork').Process(target=work)\n"
        "    p.start(); p.join()\n"
        "    logging.getLogger().handlers[:] = [logging.StreamHandler(sys.stderr)]\n"
        "    logging.error('%d', 'not a number')\n"
        "def main():\n"
        "    raise ValueError('bad batch size 0')\n"
        "atexit.register(after)\n"
        "main()\n"))
    heads = [i for i, line in enumerate(lines) if line.startswith(("Process ", "--- Logging error"))]
    assert [lines[i] for i in heads] == ["Process ForkProcess-1:", "--- Logging error ---"], lines
    assert lines.index("ValueError: bad batch size 0") < heads[0]
    assert exception.from_log(lines) == exc("ValueError", "bad batch size 0", path, 10, "main")


def test_only_another_threads_traceback_is_still_named(tmp_path):
    path, lines = run_py(tmp_path, "thr.py", (
        "import sys, threading\n"
        "t = threading.Thread(target=lambda: {}['gone'])\n"
        "t.start(); t.join()\n"
        "sys.exit(3)\n"))
    assert exception.from_log(lines)["type"] == "KeyError"


def test_a_library_frame_names_the_scripts_caller(tmp_path):
    lines = ["Traceback (most recent call last):",
             '  File "/home/u/train.py", line 41, in step',
             "    y = model(x)",
             '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 125, in forward',
             "    return F.linear(input, self.weight, self.bias)",
             "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)"]
    assert exception.from_log(lines) == exc(
        "RuntimeError", "mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)",
        "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward",
        caller={"file": "/home/u/train.py", "line": 41, "function": "step"})


def test_a_prefixed_traceback_and_one_cut_by_other_output():
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/w/a.py", line 3, in <module>',
             "another writer's line",
             "[rank1]:     f()",
             "[rank1]: IndexError: list index out of range"]
    assert exception.from_log(lines) == exc("IndexError", "list index out of range", "/w/a.py", 3,
                                            "<module>")
    cut = ["Traceback (most recent call last):", '  File "/w/a.py", line 3, in <module>']
    assert exception.from_log(cut) is None
    assert exception.from_log(cut + lines[:1] + lines[1:]) == exception.from_log(lines)


def test_a_log_without_a_traceback():
    assert exception.from_log(["loss is nan, giving up", "Error: something", "  File x"]) is None
    assert exception.from_log([]) is None


TORCH_SCRIPT = (
    "import atexit\n"
    "from torch.distributed.elastic.multiprocessing.errors import record\n"
    "atexit.register(lambda: print('after\\n' * 50))\n"
    "def load_batch(n):\n"
    "    raise ValueError(f'bad batch size {n}\\nsee the data loader')\n"
    "@record\n"
    "def main():\n"
    "    load_batch(0)\n"
    "main()\n")


def test_torchs_own_error_file(tmp_path):
    """torch's @record, run for real, writes the file this reads."""
    pytest.importorskip("torch")
    err = tmp_path / "error_1.json"
    path, lines = run_py(tmp_path, "train.py", TORCH_SCRIPT, env={"TORCHELASTIC_ERROR_FILE": str(err)})
    assert lines[-2:] == ["after", ""]      # the log ends in other output
    data = json.loads(err.read_text())
    assert data["message"]["message"] == "ValueError: bad batch size 0\nsee the data loader"
    assert exception.from_error_file(err.read_text()) == exc(
        "ValueError", "bad batch size 0\nsee the data loader", path, 5, "load_batch",
        source="error_file")
    # the whole way, as the supervisor asks for it after the worker exited 1
    log = tmp_path / "worker_1.log"
    log.write_text("\n".join(lines) + "\n")
    found = exception.find(str(err), str(log), {}, 1, None)
    assert found == exc("ValueError", "bad batch size 0\nsee the data loader", path, 5,
                        "load_batch", source="error_file", error_file=str(err))


def test_error_file_formats():
    chained = {"message": {"message": "RuntimeError: outer", "extraInfo": {"timestamp": "1",
               "py_callstack": "Traceback (most recent call last):\n  File \"/w/t.py\", line 2, in f\n"
                               "KeyError: 'k'\n\nDuring handling of the above exception, another "
                               "exception occurred:\n\nTraceback (most recent call last):\n"
                               "  File \"/w/t.py\", line 4, in f\nRuntimeError: outer\n"}}}
    assert exception.from_error_file(json.dumps(chained)) == exc(
        "RuntimeError", "outer", "/w/t.py", 4, "f", source="error_file",
        first={"type": "KeyError", "message": "'k'", "file": "/w/t.py", "line": 2,
               "function": "f", "link": "context"})
    newer = {"message": "OSError: disk full", "timestamp": 1}   # torch's other format
    assert exception.from_error_file(json.dumps(newer)) == exc(
        "OSError", "disk full", None, None, None, source="error_file")
    assert exception.from_error_file(json.dumps({"message": {"message": "AssertionError: ",
                                                             "extraInfo": {}}}))["message"] == ""
    for junk in ("", "{", "[]", '{"message": "<NONE>"}', '{"message": 3}'):
        assert exception.from_error_file(junk) is None, junk


def write_log(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


TB = ["Traceback (most recent call last):", '  File "/w/t.py", line 9, in main',
      "ValueError: from the log"]
ERR = {"message": {"message": "KeyError: 'from the file'", "extraInfo": {
    "timestamp": "1", "py_callstack": "Traceback (most recent call last):\n"
    "  File \"/w/t.py\", line 5, in load\nKeyError: 'from the file'\n"}}}


def test_the_error_file_first_then_the_log(tmp_path):
    log, err = tmp_path / "worker_0.log", tmp_path / "error_0.json"
    write_log(log, TB)
    assert exception.find(str(err), str(log), {}, 1, None)["message"] == "from the log"
    err.write_text(json.dumps(ERR))
    assert exception.find(str(err), str(log), {}, 1, None)["message"] == "'from the file'"
    assert exception.find(None, str(log), {}, 1, None)["source"] == "log"


def test_a_signal_reads_no_log_and_a_stale_error_file_is_not_read(tmp_path):
    log, err = tmp_path / "worker_0.log", tmp_path / "error_0.json"
    write_log(log, TB)
    assert exception.find(str(err), str(log), {}, 137, 9) is None   # killed: died of the signal
    err.write_text(json.dumps(ERR))
    assert exception.find(str(err), str(log), {}, 137, 9)["source"] == "error_file"
    old = time.time() - 3600
    os.utime(err, (old, old))       # another run's: older than this worker's log
    fd = logs.open_log(str(log))
    os.close(fd)
    write_log(log, TB)
    found = logs.status_exception(str(log), {"TORCHELASTIC_ERROR_FILE": str(err)}, 1, None)
    assert found["message"] == "from the log"
    assert logs.status_exception(str(log), {}, 1, None, cause="terminated") is None
    assert logs.status_exception(str(log), {}, 0, None) is None


def test_a_traceback_far_back_in_a_long_log(tmp_path):
    log = tmp_path / "worker_0.log"
    write_log(log, TB + ["x" * 99] * 9000)           # ~0.9 MB after it: found
    assert exception.find(None, str(log), {}, 1, None)["message"] == "from the log"
    write_log(log, TB + ["x" * 99] * 11000)          # beyond the window (the error file is not)
    assert exception.find(None, str(log), {}, 1, None) is None


def test_secrets_are_masked_and_long_messages_cut(tmp_path):
    log = tmp_path / "worker_0.log"
    secret = "hunter2-secret-value"
    write_log(log, ["Traceback (most recent call last):",
                    f'  File "/w/{secret}/t.py", line 9, in main',
                    f"PermissionError: token {secret} refused " + "y" * 3000])
    found = exception.find(None, str(log), {"HF_TOKEN": secret}, 1, None)
    assert found["file"] == f"/w/{contract.MASK}/t.py"
    assert found["message"].startswith(f"token {contract.MASK} refused yyy")
    assert len(found["message"]) == exception.MESSAGE_CHARS


def test_the_status_line_carries_it_and_the_launcher_reads_it_back():
    found = exc("ValueError", "bad batch size 0", "/w/train.py", 41, "load_batch")
    line = status_line(1, "h2", "worker", "exit", 1, None, "self", "/l/worker_1.log", ["x"],
                       exception=found)
    assert json.loads(line[len(contract.STATUS_PREFIX):])["exception"] == found
    assert parse_status_line(line).exception == found
    plain = status_line(1, "h2", "worker", "exit", 1, None, "self", "/l/worker_1.log", ["x"])
    assert "exception" not in plain and parse_status_line(plain).exception is None


def test_an_in_place_restarts_status_line_carries_the_root_causes_exception(capfd):
    """The exception travels from the failed rank's adapter to rank 0's coordinator (over TCP,
    rank/inplace/coordinate.py) into the restart-in-place status line the launcher records."""
    from mpilaunch.rank.inplace import coordinate
    from helpers.ports import free_port

    port = int(free_port())
    coord = coordinate.Coordinator(port, 0, 2, 2, "h0")
    clients = [coordinate.Client(0, lambda ev: None, coordinator=coord),
               coordinate.Client(1, lambda ev: None, addr="127.0.0.1", port=port)]
    found = exc("ValueError", "bad batch size 0", "/w/train.py", 41, "load_batch")
    try:
        assert all(c.connected.wait(5) for c in clients)
        assert clients[1].fail(0, {"rank": 1, "host": "h1", "role": "worker", "code": 1,
                                   "signal": None, "t": 10.0, "exception": found})
        text, deadline = "", time.monotonic() + 10
        while contract.STATUS_PREFIX not in text and time.monotonic() < deadline:
            text += capfd.readouterr().err
            time.sleep(0.05)
        [line] = [ln for ln in text.splitlines() if ln.startswith(contract.STATUS_PREFIX)]
        event = parse_status_line(line)
        assert (event.event, event.rank, event.exception) == (coordinate.RESTART_EVENT, 1, found)
    finally:
        for c in clients:
            c.close()
        coord.close()
