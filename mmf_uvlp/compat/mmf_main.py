"""Fixes for MMF's main branch (1.0.0rc12, installed from source).

MMF main runs on a modern stack itself (its own environment makes it import and train),
so unlike ``rc10.py`` nothing here shims a library: only MMF main's own behaviour that
the plugin's documented usage trips over. Each fix names the exact error it repairs
on MMF main; where MMF main kept rc10's code, the fix is rc10's, applied by name here.
The plugin's own training behaviour that MMF main lacks is the ``uvlp`` trainer
(``mmf_uvlp.trainers``), not a fix; its behaviour at MMF's command line is in
``entry_point.py``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, List

from mmf_uvlp.compat import FixSet, rc10

FIXES = FixSet(mmf_version="1.0.0rc12")
logger = logging.getLogger(__name__)

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
    "feature_files_run_no_code",
    "a crafted feature file runs code (MMF main's feature readers, like rc10's, load "
    "`<name>.npy`, `<name>_info.npy` and imdb `.npy` files with np.load(allow_pickle=True) "
    "and LMDB values with pickle.loads, and follow a feature_path out of the features "
    "folder); a NaN feature trains silently; truncated files and missing LMDB keys fail "
    "naming no file",
    stage="post",
)(rc10._feature_files_run_no_code)


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
)(rc10._relative_data_dir)


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
    from mmf_uvlp.training.resumable_checkpoints import load_run_checkpoint
    from mmf_uvlp.utils.checkpoint_files import omegaconf_containers

    def _torch_load(self: Checkpoint, file: str) -> Any:
        local_path = PathManager.get_local_path(file, force=True)
        device = self.device if "cuda" in str(self.device) else "cpu"
        return load_run_checkpoint(self, file, local_path, device, omegaconf_containers())

    Checkpoint._torch_load = _torch_load


# (training key, its Lightning twin in trainer.params): MMF main's Lightning trainer reads
# only the latter. val_check_interval counts batches, the others updates.
LIGHTNING_TWINS = (
    ("max_updates", "max_steps"),
    ("max_epochs", "max_epochs"),
    ("evaluation_interval", "val_check_interval"),
    ("log_interval", "log_every_n_steps"),
    ("update_frequency", "accumulate_grad_batches"),
)


def lightning_params_from_training(config: Any, defaults: Any) -> List[str]:
    """Make ``config.trainer.params`` follow ``config.training`` (MMF's defaults: ``defaults``).

    A training key the user set (it differs from MMF's default) sets its Lightning twin left
    at MMF's default; a twin the user set sets the training key left at its default (the
    schedule's ``${training.max_updates}`` and the curriculum then see the real run length);
    both set and different is a :class:`UserConfigError`. An evaluation interval in batches
    spans epochs (``check_val_every_n_epoch: null``), as MMF's own trainer counts it.
    Returns one line per key set.
    """
    from omegaconf import open_dict

    from mmf_uvlp.utils.user_config import UserConfigError

    training, params = config.training, config.trainer.params
    default_training, default_params = defaults.training, defaults.trainer.params
    batches = int(training.get("update_frequency", 1) or 1)
    if params.get("accumulate_grad_batches", 1) != default_params.get("accumulate_grad_batches", 1):
        batches = int(params.accumulate_grad_batches)
    changed: List[str] = []
    with open_dict(training), open_dict(params):
        for key, twin in LIGHTNING_TWINS:
            scale = batches if twin == "val_check_interval" else 1
            value, twin_value = training.get(key, None), params.get(twin, None)
            wanted = None if value is None else value * scale
            if twin_value == wanted:
                continue
            if twin_value == default_params.get(twin, None):
                params[twin] = wanted
                changed.append(f"trainer.params.{twin}={wanted} (from training.{key})")
            elif value == default_training.get(key, None) and not isinstance(twin_value, float):
                training[key] = None if twin_value is None else twin_value // scale
                changed.append(f"training.{key}={training[key]} (from trainer.params.{twin})")
            else:
                unit = f", counted in batches, {scale} an update" if scale > 1 else ""
                raise UserConfigError(
                    f"training.{key}={value} and trainer.params.{twin}={twin_value} disagree "
                    f"(training.trainer=lightning follows trainer.params.{twin}{unit}); "
                    "set only one of them"
                )
        if isinstance(params.get("val_check_interval"), int) \
                and "check_val_every_n_epoch" not in params:
            params.check_val_every_n_epoch = None
            changed.append("trainer.params.check_val_every_n_epoch=None (the evaluation "
                           "interval spans epochs, as in MMF's trainer)")
    return changed


@FIXES.fix(
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
)
def _lightning_follows_training_keys() -> None:
    from mmf.trainers.lightning_trainer import LightningTrainer
    from mmf.utils.configuration import get_default_config_path, load_yaml

    init = LightningTrainer.__init__

    @functools.wraps(init)
    def __init__(self: LightningTrainer, config: Any) -> None:
        for line in lightning_params_from_training(config, load_yaml(get_default_config_path())):
            logger.info("lightning trainer: %s", line)
        init(self, config)

    LightningTrainer.__init__ = __init__
