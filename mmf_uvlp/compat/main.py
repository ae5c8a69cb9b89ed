"""Fixes for MMF's main branch (1.0.0rc12, installed from source).

MMF main runs on a modern stack itself (its own environment makes it import and train),
so unlike ``rc10.py`` nothing here shims a library: only MMF main's own behaviour that
the plugin's documented usage trips over. Each fix names the exact error it repairs
on MMF main; where MMF main kept rc10's code, the fix is rc10's, applied by name here.
"""

from __future__ import annotations

import functools

from mmf_uvlp.compat import FixSet, rc10
from mmf_uvlp.training import run_lock

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
    "run_folder_lock",
    "two mmf_run into one env.save_dir both exit 0 (MMF main, like rc10, takes no lock on "
    "its save dir): the second overwrites the first's checkpoints and the two runs' lines "
    "interleave in one train.log",
    stage="post",
    trigger="mmf_cli.run",
)(run_lock.install)

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
