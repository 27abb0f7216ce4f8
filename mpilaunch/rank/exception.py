"""The exception a failed worker died of, for its status line: the type, the message and the
raising frame (``file:line in function``), which the launcher's summary puts on the root
cause's line (docs/FAILURES.md, "The exception"). Pure apart from :func:`find`.

Imported only once a worker has failed (logs.status_exception), never at a rank's start:
every rank pays for each import there (docs/ARCHITECTURE.md, start-up), so ``json`` and ``re``
are fine here.

Which source first. torch's error file (``TORCHELASTIC_ERROR_FILE``, written by
``torch.distributed.elastic.multiprocessing.errors.record``) is read first: the raising
process wrote it itself, at the moment the exception left the decorated function, as JSON
(the whole message, also a multi-line one, and the formatted traceback), so it stays right
whatever the process writes after it (threads, atexit handlers, DataLoader workers, a
buffered stdout flushed at exit) and however long the log grows. The log is the fallback,
for scripts without ``@record``; it is read only for a worker that *exited* non-zero (a
worker killed by a signal died of the signal, and a traceback it logged and caught earlier
would name the wrong cause).

Which traceback of the log. The **last** one (of the log's last :data:`LOG_WINDOW` bytes)
that Python did not mark as another thread's or process's: an uncaught exception ends the
main thread, so every traceback the main thread logged and caught came before it, and what
comes after it is written by other threads, atexit handlers and child processes, whose
uncaught tracebacks Python heads with a line of their own ("Exception in thread ...",
"Error in atexit._run_exitfuncs:", "Exception ignored in ...", multiprocessing's
"Process NAME:", logging's "--- Logging error ---"): those are skipped (taken only when
there is no other). A chain ("The above exception was the direct cause ...", "During
handling of the above exception ...") is one traceback: the exception named is the last of
the chain (the one the process died of), and the first of the chain is kept beside it
(``first``: often the real cause, e.g. an error in an ``except`` block hiding the original).
A log gives only the first line of a multi-line message (the lines after it cannot be told
from later output); the error file gives all of it.

The result is a dict, JSON-ready: ``type``, ``message``, ``file``, ``line``, ``function``
(None for a SyntaxError's frame), ``source`` (``error_file`` or ``log``), ``error_file``
(its path, for that source); ``caller`` (``{file, line, function}``: the innermost frame
outside the Python library and installed packages, when the raising frame is inside them);
``first`` (``{type, message, file, line, function, link}``, ``link`` ``cause`` or
``context``: the first exception of a chain). Every text is masked with the one secret rule
(:func:`mpilaunch.contract.mask_lines`) and cut to :data:`MESSAGE_CHARS`."""
from __future__ import annotations

import json
import os
import re

from mpilaunch.contract import mask_lines

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Tuple, TypedDict

    Frame = Tuple[str, int, Optional[str]]   # file, line, function (None: a SyntaxError's)

    class Block(TypedDict):   # one printed exception of a traceback
        type: str; message: str; frames: List[Frame]; link: Optional[str]   # noqa: E702

LOG_WINDOW = 1 << 20           # bytes of the log's end searched for a traceback
ERROR_FILE_MAX = 4 << 20       # a larger error file is not read
MESSAGE_CHARS = 1000           # each text cut to this (after masking): the status line stays short
SYNTAX_LINES = 6               # a SyntaxError printed without a header: its frame to its line
HEADER = "Traceback (most recent call last):"
CHAIN = {"The above exception was the direct cause of the following exception:": "cause",
         "During handling of the above exception, another exception occurred:": "context"}
# The line Python (or logging, multiprocessing) writes right before a traceback that is not
# the main thread's uncaught exception.
_OTHER = re.compile(r"Exception in thread |Error in atexit\._run_exitfuncs:|Exception ignored"
                    r"|--- Logging error ---|Process \S+:$")
_FRAME = re.compile(r'  File "(.*)", line (\d+)(?:, in (.*))?$')
_EXC = re.compile(r"([A-Za-z_][\w.]*)(?:: (.*))?$")
_LIBRARY = re.compile(r"/(?:site|dist)-packages/|/lib/python\d[\d.]*/|^<")


def _block(lines: List[str], i: int, prefix: str,
           end: Optional[int] = None) -> Tuple[Optional[Block], int]:
    """The traceback starting at ``lines[i]`` (its header, or a SyntaxError's first frame),
    looked for up to ``lines[end]``: -> ({type, message, frames}, the index of its exception
    line), or (None, index reached)."""
    frames: List[Frame] = []
    for j in range(i, min(len(lines), end) if end is not None else len(lines)):
        line = lines[j]
        if prefix and line.startswith(prefix):
            line = line[len(prefix):]
        m = _FRAME.match(line)
        if m:
            frames.append((m.group(1), int(m.group(2)), m.group(3)))
            continue
        if j == i or not line or line[0] in " \t":   # header, source lines, carets, "[Previous..."
            continue
        m = _EXC.match(line)
        if m and frames:
            return {"type": m.group(1), "message": m.group(2) or "", "frames": frames,
                    "link": None}, j
        if _header(line) is not None or line.strip() in CHAIN:
            return None, j - 1      # a cut traceback: the next one starts here
        # anything else is another writer's line in the middle of it: skipped
    return None, (len(lines) if end is None else i)


def _header(line: str) -> Optional[str]:
    """The prefix before a traceback's header on ``line``, or None when it is not one."""
    text = line.rstrip()
    return text[:-len(HEADER)] if text.endswith(HEADER) else None


def tracebacks(lines: List[str]) -> List[Tuple[bool, List[Block]]]:
    """Every traceback in ``lines``, in order: ``(other, chain)``, ``chain`` the exceptions of
    one chain as printed (each ``{type, message, frames, link}``), ``other`` True when Python
    headed it as another thread's or process's (the module's docstring)."""
    out: List[Tuple[bool, List[Block]]] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        prefix = _header(line)
        # a SyntaxError's frame (no ", in FUNCTION"), its source line, the caret, the exception
        headless = (prefix is None and line[-1:].isdigit() and line.startswith('  File "')
                    and any(x[:1].isalpha() and "Error" in x for x in lines[i + 1:i + SYNTAX_LINES])
                    and _FRAME.match(line) is not None)
        if prefix is None and not headless:
            i += 1
            continue
        block, j = _block(lines, i, prefix or "", end=i + SYNTAX_LINES if headless else None)
        if block is None or (headless and not block["type"].endswith("Error")):
            i = max(j, i) + 1
            continue
        other = i > 0 and bool(_OTHER.match(lines[i - 1].strip()))
        block["link"] = None
        chain = [block]
        while True:         # "The above exception ...": the next traceback belongs to this one
            k = j + 1
            while k < n and not lines[k][len(prefix or ""):].strip():
                k += 1
            link = CHAIN.get(lines[k][len(prefix or ""):].strip()) if k < n else None
            if link is None:
                break
            k += 1
            while k < n and not lines[k][len(prefix or ""):].strip():
                k += 1
            head = _header(lines[k]) if k < n else None
            if head is None:
                break
            nxt, j2 = _block(lines, k, head)
            if nxt is None:
                break
            nxt["link"], j = link, j2
            chain.append(nxt)
        out.append((other, chain))
        i = j + 1
    return out


def _is_library(path: str) -> bool:
    return bool(_LIBRARY.search(path))


def _result(chain: List[Block], source: str, kind: Optional[str] = None,
            message: Optional[str] = None) -> Dict[str, Any]:
    """The result dict for ``chain`` (the last exception is the one named); ``kind`` and
    ``message`` replace the traceback's (the error file's own words)."""
    last = chain[-1] if chain else None
    out: Dict[str, Any] = {
        "type": kind if kind is not None else (last["type"] if last else None),
        "message": message if message is not None else (last["message"] if last else ""),
        "file": None, "line": None, "function": None, "source": source}
    frames = last["frames"] if last else []
    if frames:
        out["file"], out["line"], out["function"] = frames[-1]
        if _is_library(frames[-1][0]):
            mine = [f for f in frames if not _is_library(f[0])]
            if mine:
                out["caller"] = dict(zip(("file", "line", "function"), mine[-1]))
    if len(chain) > 1:
        first = chain[0]
        f = first["frames"][-1]
        out["first"] = {"type": first["type"], "message": first["message"], "file": f[0],
                        "line": f[1], "function": f[2], "link": chain[1]["link"]}
    return out


def from_log(lines: List[str]) -> Optional[dict]:
    """The exception of the log's last traceback not headed as another thread's or process's
    (else the last one of those); None when the log holds none."""
    found = tracebacks(lines)
    if not found:
        return None
    mine = [chain for other, chain in found if not other]
    return _result(mine[-1] if mine else found[-1][1], "log")


def from_error_file(text: str) -> Optional[dict]:
    """The exception in the text of torch's error file: ``{"message": {"message": "TYPE:
    TEXT", "extraInfo": {"py_callstack": TRACEBACK, "timestamp": ...}}}`` (torch's
    ErrorHandler.record_exception), or the newer ``{"message": "TEXT", "timestamp": ...}``;
    None when it holds neither."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    msg = data.get("message") if isinstance(data, dict) else None
    stack = None
    if isinstance(msg, dict):
        extra = msg.get("extraInfo")
        stack = extra.get("py_callstack") if isinstance(extra, dict) else None
        msg = msg.get("message")
    if not isinstance(msg, str) or not msg.strip() or msg == "<NONE>":
        return None
    head, sep, rest = msg.partition(": ")
    if sep and _EXC.match(head) and " " not in head:
        kind, message = head, rest
    elif _EXC.match(msg.rstrip(":").strip()) and " " not in msg.strip():
        kind, message = msg.rstrip(": ").strip(), ""
    else:
        kind, message = None, msg
    found = tracebacks(stack.splitlines()) if isinstance(stack, str) else []
    chain = found[-1][1] if found else []
    return _result(chain, "error_file", kind=kind or (chain[-1]["type"] if chain else None),
                   message=message)


def read_log_end(path: str, window: int = LOG_WINDOW) -> List[str]:
    """The lines of the last ``window`` bytes of ``path`` (the first, probably cut, dropped)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - window))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if size > window else lines


def _read_error_file(path: str, since_ns: Optional[int]) -> Optional[dict]:
    """The error file's exception; None when it is missing, too large, or older than
    ``since_ns`` (the worker's log was opened then: an older file is another run's)."""
    try:
        st = os.stat(path)
        if st.st_size > ERROR_FILE_MAX or (since_ns is not None and st.st_mtime_ns < since_ns):
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    found = from_error_file(text)
    if found is not None:
        found["error_file"] = os.path.abspath(path)
    return found


def _masked(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return mask_lines([value], env, cut=MESSAGE_CHARS)[0]
    if isinstance(value, dict):
        return {k: _masked(v, env) for k, v in value.items()}
    return value


def find(error_file: Optional[str], log_path: str, env: Mapping[str, str], code: Optional[int],
         signal: Optional[int], since_ns: Optional[int] = None) -> Optional[dict]:
    """The exception worker's failure names (the module's docstring: the error file first,
    then the log's traceback for a worker that exited non-zero), masked with ``env``'s
    secrets and cut; None when neither holds one."""
    found = _read_error_file(error_file, since_ns) if error_file else None
    if found is None and code and not signal:
        found = from_log(read_log_end(log_path))
    return None if found is None else _masked(found, env)
