"""A small script that stands in for a real project's training entry point in
tests/e2e/test_torchrun_lines.py (run as ``-m tline.show`` or as a file)."""
