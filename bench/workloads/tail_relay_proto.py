"""PROTOTYPE of a proposed mpilaunch change (not mpilaunch code): "log first, console from
the log". The worker writes straight into its log file (like ``--tail_worker_log none``,
zero copy); a thread follows the file and copies whole lines, each prefixed ``[rank0] ``,
to this process's stdout (under mpirun: the pty mpirun reads). The console may lag behind
the worker but can never block it; at the end the thread drains the file before exiting.

    python tail_relay_proto.py LOG_PATH -- ARGV...
"""
import os
import subprocess
import sys
import threading

PREFIX = b"[rank0] "
CHUNK = 1 << 20


def follow(path, done, out_fd=1):
    fd = os.open(path, os.O_RDONLY)
    pending = b""
    try:
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                if done.is_set():
                    chunk = os.read(fd, CHUNK)     # the last bytes written before exit
                    if not chunk:
                        break
                else:
                    done.wait(0.05)
                    continue
            data = pending + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                body = PREFIX + data[:cut - 1].replace(b"\n", b"\n" + PREFIX) + b"\n"
                view = memoryview(body)
                while view:
                    view = view[os.write(out_fd, view):]
            pending = data[cut:]
        if pending:
            os.write(out_fd, PREFIX + pending + b"\n")
    finally:
        os.close(fd)


def main(argv):
    i = argv.index("--")
    log_path, cmd = argv[0], argv[i + 1:]
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    done = threading.Event()
    proc = subprocess.Popen(cmd, stdout=log_fd, stderr=subprocess.STDOUT)
    os.close(log_fd)
    t = threading.Thread(target=follow, args=(log_path, done), daemon=True)
    t.start()
    rc = proc.wait()
    done.set()
    t.join()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
