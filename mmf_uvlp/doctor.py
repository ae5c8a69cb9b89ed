"""``python -m mmf_uvlp.doctor``: is this environment able to run MMF with mmf_uvlp?

Prints MMF's version, the Python / torch / transformers versions, every
compatibility fix and whether it applied (or was disabled by the environment), whether
MMF's yaml configs are found, whether the plugin's components are registered and, for
``--run OPTS``, which trainer that run uses; ends with ``OK`` or a list
of problems with how to fix each. Exits non-zero on problems.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import traceback
from typing import List, Optional, Sequence

from mmf_uvlp import compat

SETUP_HINT = "run `make setup` (tools/setup_env.sh) from the mmf_uvlp checkout"


def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run_trainer(opts: Sequence[str]) -> str:
    """The trainer of the run ``mmf_run OPTS`` would configure, and whose behaviour it has."""
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    from mmf_uvlp.trainers.choice import NAME, chosen_by

    setup_imports()
    config = Configuration(argparse.Namespace(config_override=None, opts=list(opts))).get_config()
    if chosen_by(config):
        return (
            f"trainer {config.training.trainer}: the plugin's training behaviour (seeding, data order, mixed "
            "precision, resumable checkpoints, non-finite loss stop; mmf_uvlp.trainers)"
        )
    return (
        f"trainer {config.training.get('trainer')}: MMF's own training behaviour "
        f"(training.trainer={NAME} chooses the plugin's)"
    )


def diagnose(
    out=sys.stdout, quiet: bool = False, run_opts: Optional[Sequence[str]] = None
) -> List[str]:
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
        for kind, title in (
            ("fix", f"compatibility fixes for MMF {fix_set.mmf_version}:"),
            (
                "entry point",
                "the plugin's hooks at mmf_run (for runs of the "
                "plugin's trainer; mmf_uvlp/training/entry_point.py):",
            ),
        ):
            say(title)
            for fix in (fix for fix in fix_set.fixes if fix.kind == kind):
                state = (
                    "applied"
                    if fix.applied
                    else f"FAILED ({fix.failure})"
                    if fix.failure
                    else "not applied"
                )
                say(f"  [{state}] {fix.name}: {fix.error}")
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
        if run_opts:
            say(f"run           `{' '.join(run_opts)}`: {_run_trainer(run_opts)}")
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
    parser.add_argument(
        "--run",
        nargs="+",
        metavar="OPT",
        help="the options of an mmf_run command (config=... model=... "
        "datasets=...): say which trainer it uses",
    )
    args = parser.parse_args(argv)
    return 1 if diagnose(quiet=args.quiet, run_opts=args.run) else 0


if __name__ == "__main__":
    sys.exit(main())
