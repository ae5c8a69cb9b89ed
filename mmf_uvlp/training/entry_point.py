"""The plugin's behaviour at MMF's command line (``mmf_run``, and ``mmf_predict``), for
runs of the plugin's trainer (``training.trainer: uvlp``): a config or data mistake ends in
one line (:mod:`.cli_errors`), the run owns its folder (:mod:`.run_lock`, :mod:`.run_folder`),
the command line's values are checked before MMF merges them (:mod:`.command_line_values`:
one hook, MMF's ``_merge_with_dotlist`` wrapped once) and a CPU-only torch can spawn
distributed processes (:mod:`.cpu_distributed`). MMF's own runs (another trainer) keep MMF's
command line, except that ``mmf_predict``'s own ``evaluation.predict=true`` is read as MMF
means it and a CPU-only torch can spawn.

Each is a :class:`Hook`: a wrapper of one MMF function, which the compatibility layer's import
hook puts in that function's place after the first import of its trigger module, beside the
version fixes (:mod:`mmf_uvlp.compat`); they are listed by ``python -m mmf_uvlp.doctor`` and
disabled by name with ``$MMF_UVLP_DISABLE_FIXES``, as the fixes are.
"""

from __future__ import annotations

import functools
import os
import random
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from mmf_uvlp.utils.mmf_version import MMF_MAIN_VERSION, RC10_VERSION, mmf_main_installed


@dataclass(frozen=True)
class Hook:
    """One behaviour of the plugin at MMF's command line, and what it changes: ``wrap`` takes
    the MMF function that ``target`` names (its owner, a module or class, and attribute) and
    returns the function that replaces it. The compatibility layer makes the replacement."""

    name: str
    changes: str  # what MMF's command line does without it, and with it
    target: Callable[[], Tuple[Any, str]]
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
    trigger: str = "mmf_cli.run"  # the module whose first import installs it
    versions: Tuple[str, ...] = (RC10_VERSION, MMF_MAIN_VERSION)


def _cli_attribute(name: str) -> Callable[[], Tuple[Any, str]]:
    """The target ``mmf_cli.run.<name>``."""

    def target() -> Tuple[Any, str]:
        import mmf_cli.run as cli

        return cli, name

    return target


ONE_LINE_USER_ERRORS = (
    "a config mistake (no BERT folder, `key=true`, a data path that does not exist) ends "
    "a 40-frame stack trace, e.g. ImportError: ... requires the protobuf library from the "
    "tokenizer when bert-base-uncased cannot be downloaded, or FileNotFoundError: ... "
    "imdb_train2014.npy naming no config key; a refused or damaged data file (its "
    "FormatError names the file) also ends in a stack trace, and so does a run stopped by "
    "its data or its disk (a non-finite loss, ENOSPC during a checkpoint write, a refused "
    "checkpoint); mmf_run now prints `mmf_run: error: ...` and exits with status 2 "
    "(config or data file) or 1 (run)"
)


def one_line_user_errors(run: Callable[..., Any]) -> Callable[..., Any]:
    """``mmf_cli.run.run`` ending a plugin's error (or any config error of a run of the
    plugin's trainer) with one line and its exit status."""
    from mmf.common.registry import registry

    from mmf_uvlp.training.cli_errors import user_error_of

    @functools.wraps(run)
    def run_reporting_user_errors(*args: Any, **kwargs: Any) -> Any:
        try:
            return run(*args, **kwargs)
        except Exception as exc:
            found = user_error_of(exc)
            if found is None:
                raise
            message, status = found
            writer = registry.get("writer", None, no_warning=True)
            if hasattr(writer, "write"):  # rc10's Logger: the run's train.log gets it too
                writer.write(f"error: {message}", "error", donot_print=True)
            print(f"mmf_run: error: {message}", file=sys.stderr)
            raise SystemExit(status) from None

    return run_reporting_user_errors


def _rank(config: Any, init_distributed: bool) -> int:
    """This process's rank in the run (0 when not distributed)."""
    if not init_distributed:
        return 0
    rank = config.distributed.rank
    return 0 if rank is None else int(rank)


RUN_FOLDER_LOCK = (
    "two mmf_run into one env.save_dir both exit 0: the second overwrites the first's "
    "checkpoints and the two runs' lines interleave in one train.log (MMF takes no lock on "
    "its save dir); now the second stops with `mmf_run: error: run folder ... is in use by "
    "pid ... on host ...`; likewise a training run into a folder holding another run's "
    "final checkpoint, which MMF replaces without a word (mmf_uvlp.training.run_folder)"
)


def run_folder_lock(main: Callable[..., Any]) -> Callable[..., Any]:
    """MMF's per-process ``main`` (``mmf_cli.run``) run under the lock of ``env.save_dir``
    (rank 0 only) in runs of the plugin's trainer; a busy folder, or a training run into a
    folder holding another run's final checkpoint, ends the command with status 2."""
    from mmf_uvlp.errors import RunFolderBusy
    from mmf_uvlp.trainers.choice import chosen_by
    from mmf_uvlp.training.run_folder import another_runs_final_checkpoint
    from mmf_uvlp.training.run_lock import RunLock

    @functools.wraps(main)
    def main_owning_its_folder(
        configuration: Any, init_distributed: bool = False, predict: bool = False
    ) -> Any:
        config = configuration.get_config()
        if _rank(config, init_distributed) != 0 or not chosen_by(config):
            return main(configuration, init_distributed, predict)
        lock = RunLock(os.path.abspath(str(config.env.save_dir)))
        try:
            lock.acquire()
        except RunFolderBusy as busy:
            print(f"mmf_run: error: {busy}", file=sys.stderr)
            raise SystemExit(2) from None
        try:
            refusal = another_runs_final_checkpoint(config)
            if refusal is not None:
                print(f"mmf_run: error: {refusal}", file=sys.stderr)
                raise SystemExit(2)
            return main(configuration, init_distributed, predict)
        finally:
            lock.release()

    return main_owning_its_folder


COMMAND_LINE_VALUES = (
    "training.lr_scheduler=true on the command line stores the string 'true' and the "
    "schedule silently stays off (MMF's _merge_with_dotlist decodes values with "
    "ast.literal_eval, which knows True/False/None only); such values of boolean or null keys "
    "are now refused with the spelling MMF expects; likewise `key=[features/cc.lmdb]` (stored "
    "as the string '[features/cc.lmdb]', failing at the first batch) and, on rc10, `key[0]=x` "
    "(dropped); `mmf_predict`'s own evaluation.predict=true is taken as True. And "
    "checkpoint.overwrite=True (or another key of the plugin's trainer: accept_mismatch, "
    "trust_resume_file, training.fp16, training.exit_on_nan_losses, training.compile, "
    "multitasking) on the command line of a run of the plugin's trainer with a model of MMF's "
    "(visual_bert, vilbert) ends in AttributeError: ... checkpoint.overwrite is missing from "
    "configuration (MMF's configs declare none of them); they are now declared for every run "
    "of the plugin's trainer (configs/trainers/uvlp.yaml)"
)


def _merge_with_dotlist_target() -> Tuple[Any, str]:
    """MMF's ``_merge_with_dotlist``: a method of rc10's ``Configuration``, a function of MMF
    main's ``mmf.utils.configuration``."""
    import mmf.utils.configuration as mmf_configuration

    owner = mmf_configuration if mmf_main_installed() else mmf_configuration.Configuration
    return owner, "_merge_with_dotlist"


def command_line_values(merge_with_dotlist: Callable[..., Any]) -> Callable[..., Any]:
    """MMF's ``_merge_with_dotlist`` checking the command line's values
    (:class:`~mmf_uvlp.training.command_line_values.DotlistCheck`) before it merges them."""
    from mmf_uvlp.training.command_line_values import DotlistCheck

    at = 0 if mmf_main_installed() else 1  # rc10's method: the Configuration comes first
    check = DotlistCheck()

    @functools.wraps(merge_with_dotlist)
    def _merge_with_dotlist(*args: Any, **kwargs: Any) -> Any:
        config, opts, rest = args[at], args[at + 1], args[at + 2 :]
        skip_missing = bool(kwargs.get("skip_missing", rest[0] if rest else False))
        opts = check(config, opts, skip_missing)
        return merge_with_dotlist(*args[:at], config, opts, *rest, **kwargs)

    return _merge_with_dotlist


def _distributed_main_then_shut_down(device_id: int, configuration: Any, predict: bool) -> None:
    """One spawned rank: MMF's ``distributed_main``, then the gloo group torn down by all
    ranks together. Left to interpreter exit, a rank aborted now and then with "terminate
    called without an active exception" (SIGABRT) while gloo's threads were still joinable."""
    import torch.distributed as dist

    import mmf_cli.run as cli

    cli.distributed_main(device_id, configuration, predict)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


CPU_DISTRIBUTED_SPAWN = (
    "AssertionError in mmf_cli.run (distributed.world_size is checked against "
    "torch.cuda.device_count(), so `distributed.world_size=2` cannot spawn CPU "
    "processes); on a CPU-only torch, world_size processes are spawned with gloo"
)


def cpu_distributed_spawn(run: Callable[..., Any]) -> Callable[..., Any]:
    """``mmf_cli.run.run`` spawning N gloo processes for ``distributed.world_size=N`` on a
    CPU-only torch."""
    import argparse

    import torch

    import mmf_cli.run as cli

    from mmf_uvlp.training.cpu_distributed import cpu_only

    def _configuration_from(opts: Optional[list]) -> Any:
        if opts is None:
            args = cli.flags.get_parser().parse_args()
        else:
            args = argparse.Namespace(config_override=None, opts=opts)
        configuration = cli.Configuration(args)
        configuration.args = args
        return configuration

    @functools.wraps(run)
    def run_cpu_processes_too(opts: Optional[list] = None, predict: bool = False) -> Any:
        cli.setup_imports()
        configuration = _configuration_from(opts)
        config = configuration.get_config()
        world_size = config.distributed.world_size
        if not (cpu_only() and world_size > 1 and config.distributed.init_method is None):
            return run(opts, predict)
        cli.infer_init_method(config)
        if config.distributed.init_method is not None:
            return run(opts, predict)
        config.start_rank = 0
        config.distributed.init_method = f"tcp://localhost:{random.randint(10000, 20000)}"
        config.distributed.rank = None
        torch.multiprocessing.spawn(
            fn=_distributed_main_then_shut_down, args=(configuration, predict), nprocs=world_size
        )

    return run_cpu_processes_too


# in the order they wrap mmf_cli.run: the spawn innermost, so that one-line errors cover it
HOOKS: Tuple[Hook, ...] = (
    Hook(
        "cpu_distributed_spawn",
        CPU_DISTRIBUTED_SPAWN,
        _cli_attribute("run"),
        cpu_distributed_spawn,
        versions=(RC10_VERSION,),
    ),
    Hook(
        "command_line_values",
        COMMAND_LINE_VALUES,
        _merge_with_dotlist_target,
        command_line_values,
        trigger="mmf.utils.configuration",  # a config built in Python has them too
    ),
    Hook("one_line_user_errors", ONE_LINE_USER_ERRORS, _cli_attribute("run"), one_line_user_errors),
    Hook("run_folder_lock", RUN_FOLDER_LOCK, _cli_attribute("main"), run_folder_lock),
)


def hooks_for(mmf_version: Optional[str]) -> List[Hook]:
    """The hooks written for ``mmf_version`` (none for another version), in their order."""
    return [hook for hook in HOOKS if mmf_version in hook.versions]
