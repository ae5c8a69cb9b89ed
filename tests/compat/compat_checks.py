"""One behavioural check per compatibility fix, runnable in a fresh process.

``python tests/compat/compat_checks.py NAME`` exits 0 when the behaviour that fix
``NAME`` repairs works, non-zero otherwise. tests/compat/test_compat.py runs every
check in-process (all fixes on) and with ``NAME`` disabled via ``$MMF_UVLP_DISABLE_FIXES``
(the check must then fail) in a process of its own: a child forked by
``compat_checks.py --serve``, which has imported the heavy libraries that are not MMF,
so that each check pays for importing MMF only.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import tempfile
import traceback
from typing import Dict

from compat_checks_common import CHECKS, _configuration, _plugin_run
from compat_checks_runs import (
    RunsCode, expect_crafted_checkpoint_refused, expect_non_finite_loss_named,
    expect_run_stopped_in_one_line, nan_batch_and_model,
)
import compat_checks_stack  # noqa: F401  (registers its checks)
import compat_checks_training  # noqa: F401  (registers its checks)
import compat_checks_vilbert  # noqa: F401  (registers its checks)

__all__ = [
    "CHECKS", "RunsCode", "_configuration", "_plugin_run", "expect_crafted_checkpoint_refused",
    "expect_non_finite_loss_named", "expect_run_stopped_in_one_line", "nan_batch_and_model",
]


# What MMF imports that triggers no fix (``transformers.modeling_utils`` would import
# torchvision, whose fix must run in each child); importing these takes most of a check's
# time in a fresh interpreter.
PRELOADED = ("torch", "torch.distributed", "torch._dynamo", "transformers",
             "transformers.generation", "sklearn.metrics", "scipy.stats", "sympy", "git",
             "requests")


def run_forked(name: str, disabled: str) -> Dict[str, str]:
    """Run check ``name`` in a forked child with ``$MMF_UVLP_DISABLE_FIXES=disabled``.

    Returns ``outcome`` (``passed``, ``raised`` with ``error``, or ``crashed``: the child
    ended without a result) and ``output``, the child's stdout and stderr."""
    from mmf_uvlp import compat

    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            os.environ[compat.DISABLE_VARIABLE] = disabled
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            atexit._clear()
            try:
                CHECKS[name]()
                result = {"outcome": "passed"}
            except BaseException as exc:  # the check's failure is the result
                traceback.print_exc()
                result = {"outcome": "raised", "error": f"{type(exc).__name__}: {exc}"[:1000]}
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(write_end, json.dumps(result).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reader:
            reply = reader.read()
        _, status = os.waitpid(pid, 0)
        log.seek(0)
        output = log.read().decode(errors="replace")
    if not reply:
        return {"outcome": "crashed", "error": f"wait status {status}", "output": output}
    return {**json.loads(reply), "output": output}


def serve() -> None:
    """Answer one JSON line ``{"name", "disabled"}`` per check on stdin with the JSON
    line of :func:`run_forked`, after importing :data:`PRELOADED`."""
    import importlib

    for module in PRELOADED:
        importlib.import_module(module)
    for line in sys.stdin:
        request = json.loads(line)
        result = run_forked(request["name"], request["disabled"])
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name", nargs="?", choices=sorted(CHECKS))
    parser.add_argument("--serve", action="store_true", help="run checks asked for on stdin")
    args = parser.parse_args()
    if args.serve:
        serve()
    elif args.name is None:
        parser.error("name a check, or --serve")
    else:
        CHECKS[args.name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
