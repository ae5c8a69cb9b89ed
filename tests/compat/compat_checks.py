"""One behavioural check per compatibility fix, runnable in a fresh process.

``python tests/compat/compat_checks.py NAME`` exits 0 when the behaviour that fix
``NAME`` repairs works, non-zero otherwise. tests/compat/test_compat.py runs every
check in-process (all fixes on) and with ``NAME`` disabled via ``$MMF_UVLP_DISABLE_FIXES``
(the check must then fail) in a process of its own: a child of a fork server that has
imported the heavy libraries that are not MMF (``helpers/forked.py``).
"""

from __future__ import annotations

import argparse
import sys

from compat_checks_common import CHECKS, _configuration, _plugin_run
from compat_checks_runs import (
    RunsCode,
    expect_crafted_checkpoint_refused,
    expect_non_finite_loss_named,
    expect_run_stopped_in_one_line,
    nan_batch_and_model,
)
import compat_checks_stack  # noqa: F401  (registers its checks)
import compat_checks_training  # noqa: F401  (registers its checks)
import compat_checks_vilbert  # noqa: F401  (registers its checks)

__all__ = [
    "CHECKS",
    "RunsCode",
    "_configuration",
    "_plugin_run",
    "expect_crafted_checkpoint_refused",
    "expect_non_finite_loss_named",
    "expect_run_stopped_in_one_line",
    "nan_batch_and_model",
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name", choices=sorted(CHECKS))
    CHECKS[parser.parse_args().name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
