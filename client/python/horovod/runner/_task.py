"""One trainer of horovod.run (horovod/runner/__init__.py): ``python -m
horovod.runner._task DIR`` sets up the caller's sys.path and main script from DIR/job.pkl,
runs the job's function and writes DIR/result.<rank>: ``(True, result)``, or ``(False,
"the exception")`` and exit status 1."""

import os
import pickle
import runpy
import sys
import traceback
import types


def _load_main(path):
    """The caller's main script as ``__mp_main__`` (its ``if __name__ == '__main__'``
    part does not run), also under ``__main__``, so that what it defines unpickles."""
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(runpy.run_path(path, run_name="__mp_main__"))
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module


def main(tmp):
    rank = int(os.environ.get("SPARSECOMM_RANK", "0"))
    status = 1
    try:
        with open(os.path.join(tmp, "job.pkl"), "rb") as f:
            where = pickle.load(f)
            sys.path[:] = where["sys_path"]
            if where["main"]:
                _load_main(where["main"])
            job = pickle.load(f)
        value = (True, job["func"](*job["args"], **job["kwargs"]))
        status = 0
    except BaseException as e:  # reported to the caller, and this trainer fails
        traceback.print_exc()
        value = (False, "%s: %s" % (type(e).__name__, e))
    out = os.path.join(tmp, "result.%d" % rank)
    with open(out + ".part", "wb") as f:
        pickle.dump(value, f)
    os.replace(out + ".part", out)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
