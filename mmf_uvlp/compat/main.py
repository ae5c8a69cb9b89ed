"""Fixes for MMF's main branch (1.0.0rc12, installed from source).

MMF main runs on a modern stack itself (its own environment makes it import and train),
so unlike ``rc10.py`` nothing here shims a library: only MMF main's own behaviour that
the plugin's documented usage trips over. Each fix names the exact error it repairs
on MMF main; where MMF main kept rc10's code, the fix is rc10's, applied by name here.
"""

from __future__ import annotations

import functools

from mmf_uvlp.compat import FixSet, rc10

FIXES = FixSet(mmf_version="1.0.0rc12")

FIXES.fix(
    "model_and_datasets_from_config_file",
    "omegaconf.errors.ConfigAttributeError: Missing key model / KeyError: Required "
    "argument 'dataset|datasets' not passed (MMF main, like rc10, reads model and "
    "datasets only from the command line, so `mmf_run config=projects/uvla/pretrain.yaml` "
    "fails although the file names both); the command line still wins",
    stage="post",
)(rc10._model_and_datasets_from_config_file)


FIXES.fix(
    "shared_lmdb_environments",
    "lmdb.Error: The environment '.../cc.lmdb' is already open in this process (py-lmdb "
    ">= 1.0 refuses a second open of one file; MMF main's LMDBFeatureReader, like rc10's, "
    "opens one per dataset split, e.g. two pre-training datasets or VQA2 train and val "
    "reading one features LMDB)",
    stage="post",
)(rc10._shared_lmdb_environments)

FIXES.fix(
    "seed_zero_seeds",
    "training.seed=0 seeds nothing (MMF main's mmf.utils.env.set_seed, like rc10's, seeds "
    "only `if seed:` while the log says 'Using seed 0'), so runs of the plugin's configs "
    "(seed 0) start from other weights and batches each time",
    stage="post",
)(rc10._seed_zero_seeds)

@FIXES.fix(
    "plugin_resolvers_kept",
    "omegaconf.errors.UnsupportedInterpolationType: Unsupported interpolation type "
    "uvlp_bert (MMF main's Configuration calls OmegaConf.clear_resolvers(), which drops "
    "the resolvers plugins registered, before it resolves the config)",
    stage="post",
)
def _plugin_resolvers_kept() -> None:
    from omegaconf.basecontainer import BaseContainer

    from mmf.utils.configuration import Configuration

    register_resolvers = Configuration._register_resolvers

    @functools.wraps(register_resolvers)
    def _register_resolvers(self: Configuration) -> None:
        registered = dict(BaseContainer._resolvers)
        register_resolvers(self)
        for name, resolver in registered.items():
            BaseContainer._resolvers.setdefault(name, resolver)

    Configuration._register_resolvers = _register_resolvers


@FIXES.fix(
    "literal_command_line_values",
    "training.lr_scheduler=true stores the string 'true' and the schedule silently stays "
    "off; `key=[features/cc.lmdb]` is stored as the string '[features/cc.lmdb]' and fails "
    "at the first batch (MMF main's _merge_with_dotlist, like rc10's, decodes values with "
    "ast.literal_eval); such values are refused with the spelling MMF expects",
    stage="post",
)
def _literal_command_line_values() -> None:
    import mmf.utils.configuration as configuration

    from mmf_uvlp.utils.user_config import check_command_line_lists, check_command_line_literals

    merge_with_dotlist = configuration._merge_with_dotlist

    @functools.wraps(merge_with_dotlist)
    def _merge_with_dotlist(config, opts, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not kwargs.get("skip_missing", args[0] if args else False):
            check_command_line_literals(config, opts)
            check_command_line_lists(config, opts)
        return merge_with_dotlist(config, opts, *args, **kwargs)

    configuration._merge_with_dotlist = _merge_with_dotlist


FIXES.fix(
    "relative_data_dir",
    "RuntimeError: Vocab file .../mmf/<env.data_dir>/.../answers_vqa.txt ... doesn't exist "
    "(MMF main's VocabFromText, like rc10's, joins a relative env.data_dir to MMF's package "
    "folder); a relative env.data_dir is now taken from the working directory",
    stage="post",
)(rc10._relative_data_dir)
