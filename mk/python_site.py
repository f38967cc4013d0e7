"""python_site.py PREFIX: where `make install` puts the Python package for PREFIX.

The directory under PREFIX/lib that this python3 already searches (Debian's python3
searches /usr/local/lib/python3.X/dist-packages, and its default sysconfig scheme would
name /usr/local/local/lib/... for the base /usr/local, a directory it never searches),
else the posix_prefix scheme's purelib for PREFIX (PREFIX/lib/python3.X/site-packages),
which the user then adds to PYTHONPATH.
"""

import os
import sys
import sysconfig


def python_site(prefix):
    prefix = os.path.normpath(prefix)
    for path in sys.path:
        if path.startswith(prefix + "/lib/") and os.path.basename(path) in (
            "site-packages",
            "dist-packages",
        ):
            return path
    return sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python_site.py PREFIX")
    print(python_site(sys.argv[1]))
