"""``python -m mmf_uvlp.doctor``: is this environment able to run MMF with mmf_uvlp?

Prints MMF's version, the Python / torch / transformers versions, every
compatibility fix and the plugin's training behaviour, whether it applied and when it
is on (every MMF run, plugin runs and runs that ask for it, or disabled by the
environment), whether MMF's yaml configs are found
and whether the plugin's components are registered; ends with ``OK`` or a list
of problems with how to fix each. Exits non-zero on problems.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import traceback
from typing import List, Optional, Sequence, Tuple

from mmf_uvlp import compat

SETUP_HINT = "run `make setup` (tools/setup_env.sh) from the mmf_uvlp checkout"


def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _when(fix: compat.Fix, disabled: List[str], run: Optional[Tuple[str, Optional[str]]]) -> str:
    """Whether ``fix`` is on, and why; for the run ``run`` (its command line and why the
    plugin's behaviour applies to it, or None) when given."""
    if fix.name in disabled:
        return f"off: disabled by ${compat.DISABLE_VARIABLE}"
    if fix.scope != "plugin":
        return "on for every MMF run (global fix: MMF needs it on this stack)"
    from mmf_uvlp.training.scope import BEHAVIOUR_KEY

    if run is not None:
        opts, reason = run
        return (f"on for `{opts}`: {reason}" if reason else
                f"off for `{opts}`: not a plugin run (no component of mmf_uvlp and "
                f"{BEHAVIOUR_KEY} not True; the plugin's training behaviour)")
    return (f"on for plugin runs (a model, dataset, processor or loss of mmf_uvlp) and runs "
            f"with {BEHAVIOUR_KEY}=True; off for other MMF runs and with "
            f"{BEHAVIOUR_KEY}=False (the plugin's training behaviour)")


def _run_reason(opts: Sequence[str]) -> Optional[str]:
    """Why the plugin's behaviour applies to the run ``mmf_run OPTS`` would configure."""
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    from mmf_uvlp.training.scope import reason

    setup_imports()
    configuration = Configuration(argparse.Namespace(config_override=None, opts=list(opts)))
    return reason(configuration.get_config())


def diagnose(out=sys.stdout, quiet: bool = False,
             run_opts: Optional[Sequence[str]] = None) -> List[str]:
    """Run every check; print the findings (for the run of ``mmf_run RUN_OPTS`` when given);
    return the list of problems."""
    problems: List[str] = []

    def say(line: str) -> None:
        if not quiet:
            print(line, file=out)

    say(f"Python        {platform.python_version()}")
    for dist in ("mmf", "torch", "transformers", "omegaconf", "torchvision"):
        say(f"{dist:<13} {_version(dist) or 'not installed'}")
    mmf_version = _version("mmf")
    if mmf_version is None:
        problems.append(f"MMF is not installed: {SETUP_HINT}")

    import_error = None
    try:
        import mmf  # noqa: F401  (the imports run the compatibility fixes)
        import mmf_cli.run  # noqa: F401
    except Exception:
        import_error = traceback.format_exc(limit=3)
        problems.append(f"`import mmf` fails:\n{import_error}")

    fix_set = compat.active_fix_set()
    if fix_set is None:
        say(f"compatibility fixes: none for MMF {mmf_version} (layer inert)")
    else:
        say(f"compatibility fixes for MMF {fix_set.mmf_version}:")
        disabled = compat.disabled_fixes()
        run = None
        if run_opts and import_error is None:
            run = (" ".join(run_opts), _run_reason(run_opts))
        for fix in fix_set.fixes:
            state = "applied" if fix.applied else f"FAILED ({fix.failure})" if fix.failure else "not applied"
            say(f"  [{state}] {fix.name}: {fix.error}")
            say(f"      {_when(fix, disabled, run)}")
            if not fix.applied and import_error is None:
                problems.append(f"fix {fix.name} did not apply ({fix.failure or 'never ran'})")

    if import_error is None:
        from mmf.common.registry import registry
        from mmf.utils.configuration import get_default_config_path

        defaults = os.path.abspath(get_default_config_path())
        found = os.path.isfile(defaults)
        say(f"MMF configs   {defaults} ({'found' if found else 'MISSING'})")
        if not found:
            problems.append(f"MMF's yaml configs are missing ({defaults}): {SETUP_HINT}")
        from mmf_uvlp.plugin import COMPONENT_MODULES

        say(f"plugin        {len(COMPONENT_MODULES)} component modules registered")
        if registry.get_model_class("visual_bert") is None:
            problems.append("MMF's registry lacks visual_bert: MMF's models did not load")

    if problems:
        print("PROBLEMS:", file=out)
        for problem in problems:
            print(f"- {problem}", file=out)
    else:
        print("OK", file=out)
    return problems


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="print only OK or the problems")
    parser.add_argument("--run", nargs="+", metavar="OPT",
                        help="the options of an mmf_run command (config=... model=... "
                             "datasets=...): say which of the plugin's behaviour acts on it")
    args = parser.parse_args(argv)
    return 1 if diagnose(quiet=args.quiet, run_opts=args.run) else 0


if __name__ == "__main__":
    sys.exit(main())
