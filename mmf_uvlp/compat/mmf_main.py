"""Fixes for MMF's main branch (1.0.0rc12, installed from source).

MMF main runs on a modern stack itself (its own environment makes it import and train),
so unlike ``rc10.py`` nothing here shims a library: only MMF main's own behaviour that
the plugin's documented usage trips over. Each fix names the exact error it repairs
on MMF main; where MMF main kept rc10's code, the fix is rc10's body (its module of
``mmf_uvlp.compat``), registered here with MMF main's error.
The plugin's own training behaviour that MMF main lacks is the ``uvlp`` trainer
(``mmf_uvlp.trainers``), not a fix; its behaviour at MMF's command line is in
``mmf_uvlp.training.entry_point``.
"""

from __future__ import annotations

import functools
from typing import Any

from mmf_uvlp.compat import configuration, feature_readers, lightning, predictions
from mmf_uvlp.compat.fix import FixSet

FIXES = FixSet(mmf_version="1.0.0rc12")

FIXES.fix(
    "model_and_datasets_from_config_file",
    "omegaconf.errors.ConfigAttributeError: Missing key model / KeyError: Required "
    "argument 'dataset|datasets' not passed (MMF main, like rc10, reads model and "
    "datasets only from the command line, so `mmf_run config=projects/uvla/pretrain.yaml` "
    "fails although the file names both); the command line still wins",
    stage="post",
)(configuration.model_and_datasets_from_file)


FIXES.fix(
    "shared_lmdb_environments",
    "lmdb.Error: The environment '.../cc.lmdb' is already open in this process (py-lmdb "
    ">= 1.0 refuses a second open of one file; MMF main's LMDBFeatureReader, like rc10's, "
    "opens one per dataset split, e.g. two pre-training datasets or VQA2 train and val "
    "reading one features LMDB)",
    stage="post",
)(feature_readers.shared_lmdb_environments)

FIXES.fix(
    "feature_files_run_no_code",
    "a crafted feature file runs code (MMF main's feature readers, like rc10's, load "
    "`<name>.npy`, `<name>_info.npy` and imdb `.npy` files with np.load(allow_pickle=True) "
    "and LMDB values with pickle.loads, and follow a feature_path out of the features "
    "folder); a NaN feature trains silently; truncated files and missing LMDB keys fail "
    "naming no file",
    stage="post",
)(feature_readers.read_as_data_only)


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


FIXES.fix(
    "relative_data_dir",
    "RuntimeError: Vocab file .../mmf/<env.data_dir>/.../answers_vqa.txt ... doesn't exist "
    "(MMF main's VocabFromText, like rc10's, joins a relative env.data_dir to MMF's package "
    "folder); a relative env.data_dir is now taken from the working directory",
    stage="post",
)(configuration.relative_data_dir)


@FIXES.fix(
    "plain_data_checkpoint_loads",
    "_pickle.UnpicklingError: Weights only load failed ... Unsupported global: GLOBAL "
    "omegaconf.listconfig.ListConfig when a run resumes (MMF main's checkpoints keep the "
    "optimizer's `betas` as a ListConfig, and torch >= 2.6 loads weights only by default); "
    "environments that set TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 to get past it unpickle anything "
    "a resume file holds, which runs its code. Now checkpoints load as plain data plus "
    "omegaconf's containers; a file holding anything else is refused, naming it",
    stage="post",
)
def _plain_data_checkpoint_loads() -> None:
    from mmf.utils.checkpoint import Checkpoint
    from mmf.utils.file_io import PathManager
    from mmf_uvlp.trainers.checkpoint import omegaconf_containers
    from mmf_uvlp.trainers.checkpoint import load_run_checkpoint

    def _torch_load(self: Checkpoint, file: str) -> Any:
        local_path = PathManager.get_local_path(file, force=True)
        device = self.device if "cuda" in str(self.device) else "cpu"
        return load_run_checkpoint(self, file, local_path, device, omegaconf_containers())

    Checkpoint._torch_load = _torch_load


FIXES.fix(
    "lightning_follows_training_keys",
    "with training.trainer=lightning a run goes on past training.max_updates (MMF main's "
    "Lightning trainer reads trainer.params.max_steps, 22000 by default; likewise max_epochs, "
    "val_check_interval, log_every_n_steps, accumulate_grad_batches for training.max_epochs, "
    "evaluation_interval, log_interval, update_frequency), and a small dataset stops with "
    "`ValueError: val_check_interval (1000) must be less than or equal to the number of the "
    "training batches`; each training key now sets its Lightning twin, two that disagree are "
    "refused in one line",
    stage="post",
    trigger="mmf.trainers.lightning_trainer",
)(lightning.follow_training_keys)


FIXES.fix(
    "nlvr2_ve_predictions",
    "AttributeError: 'NLVR2Dataset' object has no attribute 'answer_processor' (mmf_predict "
    "on nlvr2 or visual_entailment: both inherit VQA2's format_for_prediction, which reads "
    "an answer vocabulary and question_id they lack); their samples now carry an id and "
    "each writes one prediction per item named by its annotation's identifier",
    stage="post",
)(predictions.nlvr2_and_visual_entailment_predictions)
