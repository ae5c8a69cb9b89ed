"""Entry-point fixes: the plugin's behaviour at MMF's command line (``mmf_run``, and
``mmf_predict``), for runs of the plugin's trainer (``training.trainer: uvlp``).

They are labelled *entry point* (``kind``), not MMF fixes: MMF's own runs (another trainer)
keep MMF's command line, except that a CPU-only torch can spawn distributed processes,
``mmf_predict``'s own ``evaluation.predict=true`` is read as MMF means it, and rc10's known
warnings of this stack are left out of the output.
They run on the first import of ``mmf_cli.run`` (MMF's command line), the command line's
values (the trainer's keys declared and the values checked, one hook before MMF's dotlist
merge) on that of ``mmf.utils.configuration`` (so that a config built in Python has them
too); they are listed by ``python -m mmf_uvlp.doctor`` and disabled by name with
``$MMF_UVLP_DISABLE_FIXES``, as the fixes are. The behaviour itself is in
``mmf_uvlp.training``: ``cli_errors``, ``run_lock``, ``command_line_values``,
``trainer_choice``, ``cpu_distributed``.
"""

from __future__ import annotations

import functools
import os
import random
import sys
from typing import Any, List, Optional

from mmf_uvlp.compat.fix import Fix, FixSet

KIND = "entry point"

RC10 = FixSet(mmf_version="1.0.0rc10")
MMF_MAIN = FixSet(mmf_version="1.0.0rc12")


def _entry(fix_sets: List[FixSet], name: str, error: str, trigger: str = "mmf_cli.run"):
    """Decorator registering ``fn`` as the entry-point fix ``name`` of each of ``fix_sets``."""

    def decorator(fn):
        for fix_set in fix_sets:
            fix_set.fixes.append(Fix(name, error, fn, trigger=trigger, stage="post", kind=KIND))
        return fn

    return decorator


@_entry(
    [RC10, MMF_MAIN],
    "one_line_user_errors",
    "a config mistake (no BERT folder, `key=true`, a data path that does not exist) ends "
    "a 40-frame stack trace, e.g. ImportError: ... requires the protobuf library from the "
    "tokenizer when bert-base-uncased cannot be downloaded, or FileNotFoundError: ... "
    "imdb_train2014.npy naming no config key; a refused or damaged data file (its "
    "FormatError names the file) also ends in a stack trace, and so does a run stopped by "
    "its data or its disk (a non-finite loss, ENOSPC during a checkpoint write, a refused "
    "checkpoint); mmf_run now prints `mmf_run: error: ...` and exits with status 2 "
    "(config or data file) or 1 (run)",
)
def one_line_user_errors() -> None:
    """``mmf_cli.run.run`` ends a plugin's error (or any config error of a run of the
    plugin's trainer) with one line and its exit status."""
    import mmf_cli.run as cli
    from mmf.common.registry import registry

    from mmf_uvlp.training.cli_errors import user_error_of

    run = cli.run

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

    cli.run = run_reporting_user_errors


def _rank(config: Any, init_distributed: bool) -> int:
    """This process's rank in the run (0 when not distributed)."""
    if not init_distributed:
        return 0
    rank = config.distributed.rank
    return 0 if rank is None else int(rank)


@_entry(
    [RC10, MMF_MAIN],
    "run_folder_lock",
    "two mmf_run into one env.save_dir both exit 0: the second overwrites the first's "
    "checkpoints and the two runs' lines interleave in one train.log (MMF takes no lock on "
    "its save dir); now the second stops with `mmf_run: error: run folder ... is in use by "
    "pid ... on host ...`; likewise a training run into a folder holding another run's "
    "final checkpoint, which MMF replaces without a word (mmf_uvlp.training.run_folder)",
)
def run_folder_lock() -> None:
    """MMF's per-process ``main`` (``mmf_cli.run``) runs under the lock of ``env.save_dir``
    (rank 0 only) in runs of the plugin's trainer; a busy folder, or a training run into a
    folder holding another run's final checkpoint, ends the command with status 2."""
    import mmf_cli.run as cli

    from mmf_uvlp.errors import RunFolderBusy
    from mmf_uvlp.trainers.choice import chosen_by
    from mmf_uvlp.training.run_folder import another_runs_final_checkpoint
    from mmf_uvlp.training.run_lock import RunLock

    main = cli.main

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

    cli.main = main_owning_its_folder


@_entry(
    [RC10],
    "command_line_values",
    "training.lr_scheduler=true on the command line stores the string 'true' and the "
    "schedule silently stays off (Configuration._decode_value uses literal_eval, which "
    "knows True/False/None only); such values of boolean or null keys are now refused "
    "with the spelling MMF expects; likewise `key=[features/cc.lmdb]` (stored as the "
    "string '[features/cc.lmdb]', failing at the first batch) and `key[0]=x` (dropped); "
    "`mmf_predict`'s own evaluation.predict=true is taken as True. And "
    "checkpoint.overwrite=True (or another key of the plugin's trainer: accept_mismatch, "
    "trust_resume_file, training.fp16, training.exit_on_nan_losses, multitasking) on the "
    "command line of a run of the plugin's trainer with a model of MMF's (visual_bert, "
    "vilbert) ends in AttributeError: While updating configuration option "
    "checkpoint.overwrite is missing from configuration (rc10's configs declare none of "
    "them), and without them the bfloat16 default is never seen; they are now declared "
    "for every run of the plugin's trainer (configs/trainers/uvlp.yaml)",
    trigger="mmf.utils.configuration",
)
def command_line_values() -> None:
    """MMF 1.0.0rc10's ``Configuration._merge_with_dotlist``, in a run of the plugin's
    trainer, declares the trainer's keys and checks the command line's values before it
    merges them: one hook."""
    from mmf.utils.configuration import Configuration

    from mmf_uvlp.training.command_line_values import wanted, with_predict_flag_as_literal
    from mmf_uvlp.trainers.choice import declare_switches
    from mmf_uvlp.utils.user_config import check_command_line_lists, check_command_line_literals

    merge_with_dotlist = Configuration._merge_with_dotlist

    @functools.wraps(merge_with_dotlist)
    def _merge_with_dotlist(self: Configuration, config: Any, opts: Any) -> Any:
        opts = with_predict_flag_as_literal(opts)
        if wanted(config, opts):
            declare_switches(config)
            check_command_line_literals(config, opts)
            check_command_line_lists(config, opts)
        return merge_with_dotlist(self, config, opts)

    Configuration._merge_with_dotlist = _merge_with_dotlist


@_entry(
    [MMF_MAIN],
    "command_line_values",
    "training.lr_scheduler=true stores the string 'true' and the schedule silently stays "
    "off; `key=[features/cc.lmdb]` is stored as the string '[features/cc.lmdb]' and fails "
    "at the first batch (MMF main's _merge_with_dotlist, like rc10's, decodes values with "
    "ast.literal_eval); such values are refused with the spelling MMF expects; "
    "`mmf_predict`'s own evaluation.predict=true is taken as True. And "
    "checkpoint.overwrite=True (or accept_mismatch, trust_resume_file) on the command line "
    "of a run of the plugin's trainer with a model of MMF's ends in AttributeError: "
    "checkpoint.overwrite is missing from configuration (MMF main's _merge_with_dotlist); "
    "they are now declared for every run of the plugin's trainer "
    "(configs/trainers/uvlp.yaml)",
    trigger="mmf.utils.configuration",
)
def command_line_values_on_mmf_main() -> None:
    """MMF main's ``mmf.utils.configuration._merge_with_dotlist``, in a run of the plugin's
    trainer, declares the trainer's keys and checks the command line's values before it
    merges them: one hook. Its first pass (``skip_missing``) merges the overrides into
    MMF's defaults alone, before the user config and the model config that tell the run's
    trainer, and the second pass then finds ``'true'`` already written there: so the first
    pass notes what it would refuse, and the second, over the whole config, refuses it."""
    import mmf.utils.configuration as configuration

    from mmf_uvlp.errors import UserConfigError
    from mmf_uvlp.training.command_line_values import wanted, with_predict_flag_as_literal
    from mmf_uvlp.trainers.choice import declare_switches
    from mmf_uvlp.utils.user_config import check_command_line_lists, check_command_line_literals

    merge_with_dotlist = configuration._merge_with_dotlist
    noted = {}

    @functools.wraps(merge_with_dotlist)
    def _merge_with_dotlist(config, opts, *args, **kwargs):  # type: ignore[no-untyped-def]
        opts = with_predict_flag_as_literal(opts)
        key = tuple(str(opt) for opt in opts or [])
        if kwargs.get("skip_missing", args[0] if args else False):
            noted.pop(key, None)
            try:
                check_command_line_literals(config, opts, existing_only=True)
            except UserConfigError as error:
                noted[key] = error
        elif wanted(config, opts):
            declare_switches(config)
            if key in noted:
                raise noted.pop(key)
            check_command_line_literals(config, opts)
            check_command_line_lists(config, opts)
        return merge_with_dotlist(config, opts, *args, **kwargs)

    configuration._merge_with_dotlist = _merge_with_dotlist


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


@_entry(
    [RC10],
    "cpu_distributed_spawn",
    "AssertionError in mmf_cli.run (distributed.world_size is checked against "
    "torch.cuda.device_count(), so `distributed.world_size=2` cannot spawn CPU "
    "processes); on a CPU-only torch, world_size processes are spawned with gloo",
)
def cpu_distributed_spawn() -> None:
    """``mmf_run distributed.world_size=N`` spawns N gloo processes on a CPU-only torch."""
    import argparse

    import torch

    import mmf_cli.run as cli

    from mmf_uvlp.training.cpu_distributed import cpu_only

    run = cli.run

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

    cli.run = run_cpu_processes_too


@_entry(
    [RC10],
    "quiet_known_warnings",
    "every mmf_run prints UserWarning: register_resolver() is deprecated / In the sequence "
    "`MMF_USER_DIR,` some elements are missing / The epoch parameter in "
    "`scheduler.step()` ... (rc10's calls of omegaconf 2.0 and torch 1.x APIs, noise of "
    "this stack); mmf_run's output now leaves them out",
)
def quiet_known_warnings() -> None:
    """``mmf_run``'s process ignores the warnings that rc10 gives on every run of this stack."""
    import warnings

    for message in (
        r"register_resolver\(\) is deprecated",
        r"In the sequence `MMF_[A-Z_]+,` some elements are missing",
        r"The epoch parameter in `scheduler.step\(\)` was not necessary",
    ):
        warnings.filterwarnings("ignore", message=message)


# the order they wrap mmf_cli.run in: the spawn innermost, so that one-line errors cover it
ORDER = (
    "cpu_distributed_spawn",
    "command_line_values",
    "one_line_user_errors",
    "run_folder_lock",
    "quiet_known_warnings",
)


def for_version(mmf_version: str) -> List[Fix]:
    """The entry-point fixes written for ``mmf_version`` (none for another version)."""
    fixes = {RC10.mmf_version: RC10.fixes, MMF_MAIN.mmf_version: MMF_MAIN.fixes}.get(
        mmf_version, []
    )
    return sorted(fixes, key=lambda fix: ORDER.index(fix.name))
