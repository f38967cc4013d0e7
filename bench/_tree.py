"""Where a benchmark script finds sparsecomm: in the source tree (build/bin, client/python)
or in the package `make dist` builds (bin/, python/), the script being in bench/ of either.
Importing this module puts the tree's Python package first on sys.path."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
for _d in (os.path.join(ROOT, "client", "python"), os.path.join(ROOT, "python")):
    if os.path.isdir(_d):
        sys.path.insert(0, _d)


def program(name):
    """A program of the source tree (build/bin) or of the package (bin/), else the one on
    PATH."""
    for d in (os.path.join(ROOT, "build", "bin"), os.path.join(ROOT, "bin")):
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return name
