"""No hang goes unexplained (docs/HANGS.md): ``mpilaunch stacks LOG_DIR`` (command.py), the
running launcher's socket it talks to (server.py), and the odd rank out (verdict.py, pure)."""
