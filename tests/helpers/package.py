"""The package's modules as the layout tests read them (tests/launcher/test_layout.py,
test_imports.py): one walk of mpilaunch/."""
import os

from helpers import REPO

PKG = os.path.join(REPO, "mpilaunch")


def modules():
    """{dotted module name: file path} of every module of the package (a package by its name)."""
    out = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out
