"""Many short Python programs without paying each one's imports: a server process imports
the heavy libraries once (``python forked.py MODULE...``) and runs each program in a child
forked from it, as ``python ARGV...`` would in a fresh interpreter, in its own folder and
environment. Start it before anything it runs is imported: a module the server imported
is not imported again, so nothing that acts on a module's import (the compat layer's
fixes) may be among ``MODULE``.

A request is a JSON line ``{"argv", "env", "cwd", "timeout"}`` (``argv``: a script's path
or ``-c`` and its code, then its arguments; ``timeout`` in seconds); the reply a JSON line
``{"returncode", "error", "output"}``: the exit status (1 with ``error`` naming the
exception that ended the program; None with ``error`` when the child ended without a
result: killed by a signal, or by the server past its timeout) and the child's stdout and
stderr, in the order written.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union


def _run_program(argv: List[str]) -> Dict[str, object]:
    """Run ``argv`` in this process as ``python argv...``: its exit status and error."""
    inline = argv[0] == "-c"
    sys.argv = ["-c", *argv[2:]] if inline else list(argv)
    sys.path[0] = "" if inline else str(Path(argv[0]).resolve().parent)
    try:
        if inline:
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return {"returncode": stop.code or 0, "error": None}
        print(stop.code, file=sys.stderr)
        return {"returncode": 1, "error": None}
    except BaseException as exc:  # the program's failure is its result
        traceback.print_exc()
        return {"returncode": 1, "error": f"{type(exc).__name__}: {exc}"[:1000]}
    return {"returncode": 0, "error": None}


def run_forked(argv: List[str], env: Dict[str, str], cwd: str, timeout: float) -> Dict[str, object]:
    """Run ``argv`` in a child forked from this process (see the module's docstring)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            result = _run_program(argv)
            threading._shutdown()  # as the interpreter ends: its threads, then atexit
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(write_end, json.dumps(result).encode())
            os._exit(0)
        os.close(write_end)
        # the child's own children (data loader workers) may hold the pipe after it ends:
        # wait for the child, not for the pipe's end
        deadline, timed_out = time.monotonic() + timeout, False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                timed_out = True
                break
            time.sleep(0.05)
        os.set_blocking(read_end, False)
        try:
            reply = os.read(read_end, 1 << 16)
        except BlockingIOError:
            reply = b""
        os.close(read_end)
        log.seek(0)
        output = log.read().decode(errors="replace")
    if timed_out:
        return {
            "returncode": None,
            "error": f"killed past its timeout of {timeout} s",
            "output": output,
        }
    if not reply:
        return {
            "returncode": None,
            "error": f"the child ended without a result (wait status {status})",
            "output": output,
        }
    return {**json.loads(reply), "output": output}


def serve(modules: Iterable[str]) -> None:
    """Import ``modules``, then answer each request line on stdin (module docstring)."""
    for module in modules:
        importlib.import_module(module)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.write(
            json.dumps(
                run_forked(request["argv"], request["env"], request["cwd"], request["timeout"])
            )
            + "\n"
        )
        sys.stdout.flush()


class ForkServer:
    """The server process, started with ``modules`` imported; :meth:`run` runs a program."""

    def __init__(self, modules: Iterable[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(
        self,
        argv: List[Union[str, Path]],
        env: Optional[Dict[str, str]] = None,
        cwd: Union[str, Path, None] = None,
        timeout: float = 600,
    ) -> Dict[str, object]:
        request = {
            "argv": [str(arg) for arg in argv],
            "env": dict(os.environ if env is None else env),
            "cwd": str(cwd or os.getcwd()),
            "timeout": timeout,
        }
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        assert reply, f"the fork server ended (exit status {self.process.poll()})"
        return json.loads(reply)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


# What MMF imports that triggers no compat fix (``transformers.modeling_utils`` would import
# torchvision, which one fix acts on); importing these takes most of a fresh interpreter's
# time for a program that imports MMF.
HEAVY_NOT_MMF = (
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "transformers",
    "transformers.generation",
    "sklearn.metrics",
    "scipy.stats",
    "sympy",
    "git",
    "requests",
)


if __name__ == "__main__":
    serve(sys.argv[1:])
