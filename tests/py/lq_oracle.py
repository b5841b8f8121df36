"""How the Python oracle tests skip.

An oracle that cannot run (a package missing, a model not fetched) prints SKIP and exits 77,
which ctest reports as Skipped, not Passed. With LQ_REQUIRE_ORACLES=1 -- .ci/run sets it unless
LQ_ALLOW_ORACLE_SKIP=1 is given for a machine without PyPI -- every skip, whole or partial, is a
failure: CI must not count an oracle that never ran as a pass.
"""
import os
import sys


def required():
    return os.environ.get("LQ_REQUIRE_ORACLES") == "1"


def skip(reason):
    """The whole test cannot run."""
    if required():
        print(f"FAIL: oracle skipped with LQ_REQUIRE_ORACLES=1: {reason}")
        sys.exit(1)
    print(f"SKIP: {reason}")
    sys.exit(77)


def skip_part(reason):
    """One comparison cannot run; the rest of the test goes on (unless oracles are required)."""
    if required():
        print(f"FAIL: oracle part skipped with LQ_REQUIRE_ORACLES=1: {reason}")
        sys.exit(1)
    print(f"SKIP part: {reason}")
