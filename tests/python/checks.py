"""The CHECK lines of the Python workers (tests/python/worker_*.py), which
tests/python/run_tests.py counts: a decorator that runs a check at once and prints
`CHECK <name> ok` or `CHECK <name> FAIL <why>` (with the traceback)."""
import traceback


class Checks:
    def __init__(self, only=()):
        self.failed = 0
        self.only = set(only)  # names to run (empty: every one)

    def __call__(self, fn):
        if self.only and fn.__name__ not in self.only:
            return fn
        try:
            fn()
            print("CHECK %s ok" % fn.__name__, flush=True)
        except Exception as e:  # noqa: B902
            self.failed += 1
            print("CHECK %s FAIL %s: %s" % (fn.__name__, type(e).__name__, e), flush=True)
            traceback.print_exc()
        return fn
