"""Fixes for MMF 1.0.0rc10 on Python 3.11, torch 2.x, transformers 4.57, omegaconf 2.3.

Each fix names the exact error it repairs. "pre" fixes run before MMF's code is
executed (they make its imports succeed); "post" fixes patch MMF's classes once
``import mmf`` finished. Nothing here edits MMF's files.

The plugin's own training behaviour is not here: it is the ``uvlp`` trainer
(``mmf_uvlp.trainers``), which a run chooses with ``training.trainer: uvlp``; its behaviour
at MMF's command line is in ``entry_point.py``.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import importlib
import os
import sys
import types
import warnings
from typing import Any, Callable, Dict, Optional

from mmf_uvlp.compat import FixSet
from mmf_uvlp.training.cpu_distributed import DistributedWithoutNCCL, cpu_only, cuda_calls_to

FIXES = FixSet(mmf_version="1.0.0rc10")


@FIXES.fix(
    "collections_abc_aliases",
    "AttributeError: module 'collections' has no attribute 'Mapping' "
    "(mmf/utils/logger.py; the aliases were removed in Python 3.10)",
)
def _collections_abc_aliases() -> None:
    for name in ("Mapping", "MutableMapping", "Sequence", "Iterable", "Callable"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))


@FIXES.fix(
    "demjson_alias",
    "ModuleNotFoundError: No module named 'demjson' (demjson 2.2.4 no longer builds; "
    "demjson3 has the same API)",
)
def _demjson_alias() -> None:
    if "demjson" not in sys.modules:
        sys.modules["demjson"] = importlib.import_module("demjson3")


_TRANSFORMERS_FLAT_MODULES = {
    "modeling_bert": "transformers.models.bert.modeling_bert",
    "configuration_bert": "transformers.models.bert.configuration_bert",
    "tokenization_bert": "transformers.models.bert.tokenization_bert",
    "modeling_roberta": "transformers.models.roberta.modeling_roberta",
    "modeling_auto": "transformers.models.auto.modeling_auto",
    "configuration_auto": "transformers.models.auto.configuration_auto",
    "tokenization_auto": "transformers.models.auto.tokenization_auto",
}


@FIXES.fix(
    "transformers_2x_module_paths",
    "ModuleNotFoundError: No module named 'transformers.tokenization_auto' "
    "(rc10 imports transformers 2.x flat modules, BertLayerNorm and "
    "transformers.optimization.AdamW, all removed in transformers 4.x/5.x)",
)
def _transformers_2x_module_paths() -> None:
    import torch
    import transformers
    import transformers.optimization

    for flat, real in _TRANSFORMERS_FLAT_MODULES.items():
        module = importlib.import_module(real)
        sys.modules[f"transformers.{flat}"] = module
        setattr(transformers, flat, module)
    modeling_bert = sys.modules["transformers.modeling_bert"]
    if not hasattr(modeling_bert, "BertLayerNorm"):
        modeling_bert.BertLayerNorm = torch.nn.LayerNorm

    class AdamW(torch.optim.AdamW):
        """transformers 2.x AdamW: eps 1e-6, no weight decay unless asked; fused on a GPU
        (``fused``: None = :func:`mmf_uvlp.training.throughput.fused_adamw_default`)."""

        def __init__(
            self,
            params: Any,
            lr: float = 1e-3,
            betas: tuple = (0.9, 0.999),
            eps: float = 1e-6,
            weight_decay: float = 0.0,
            correct_bias: bool = True,
            fused: Optional[bool] = None,
        ):
            from mmf_uvlp.training.throughput import fused_adamw_default

            if not correct_bias:
                raise ValueError(
                    "optimizer adam_w: correct_bias=False is not supported by "
                    "torch.optim.AdamW; remove it from optimizer.params"
                )
            params = list(params)
            if fused is None:
                fused = fused_adamw_default(params)
            super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                             fused=bool(fused) or None)

    if not hasattr(transformers.optimization, "AdamW"):
        transformers.optimization.AdamW = AdamW


@FIXES.fix(
    "torchvision_without_compiled_ops",
    "RuntimeError: operator torchvision::nms does not exist (PyPI's torchvision "
    "cannot register its compiled ops beside the CPU torch; only its pure-Python "
    "parts are used by rc10 and by transformers' image utilities)",
    trigger="torchvision",
)
def _torchvision_without_compiled_ops() -> None:
    sys.modules.setdefault(
        "torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations")
    )


class _Unavailable(types.ModuleType):
    """A module whose every attribute access explains that it is unavailable."""

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        raise ImportError(
            f"{self.__name__}.{item} is unavailable: torchtext's binary does not load on "
            "torch 2.x. Use a vocabulary file (vocab type 'random'/'intersected' "
            "without torchtext embeddings) or the bert_tokenizer processor."
        )


@FIXES.fix(
    "torchtext_stub",
    "ModuleNotFoundError: No module named 'torchtext' (mmf/utils/vocab.py imports it; "
    "its binary no longer loads on torch 2.x, so setup does not install it; rc10 "
    "needs it only for torchtext's GloVe downloads)",
)
def _torchtext_stub() -> None:
    try:
        importlib.import_module("torchtext.vocab")
        return
    except Exception:
        for name in [m for m in sys.modules if m == "torchtext" or m.startswith("torchtext.")]:
            del sys.modules[name]
    package = _Unavailable("torchtext")
    vocab = _Unavailable("torchtext.vocab")
    vocab.pretrained_aliases = {}
    package.vocab = vocab
    sys.modules["torchtext"] = package
    sys.modules["torchtext.vocab"] = vocab


def _legacy_env_resolver(key: str, default: Any = None) -> Any:
    value = os.environ.get(key.strip())
    if value is None:
        return default.strip() if isinstance(default, str) else default
    return value


@FIXES.fix(
    "omegaconf_2_0_semantics",
    "ConfigAttributeError: Missing key learning_rate / ConfigAttributeError: Missing "
    "key pretty (checkpoint's config.yaml) / UnsupportedInterpolationType: Unsupported "
    "interpolation type env (rc10 was written for omegaconf 2.0, and its "
    "Configuration clears every resolver, plugins' included, e.g. uvlp_bert)",
)
def _omegaconf_2_0_semantics() -> None:
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    getattr_ = DictConfig.__getattr__
    getitem_ = DictConfig.__getitem__

    def _missing_reads_none(config: DictConfig, key: Any) -> bool:
        return not config._get_flag("struct") and key not in config

    def __getattr__(self: DictConfig, key: str) -> Any:
        try:
            return getattr_(self, key)
        except ConfigAttributeError:
            if _missing_reads_none(self, key):
                return None
            raise

    def __getitem__(self: DictConfig, key: Any) -> Any:
        try:
            return getitem_(self, key)
        except ConfigKeyError:
            if _missing_reads_none(self, key):
                return None
            raise

    DictConfig.__getattr__ = __getattr__
    DictConfig.__getitem__ = __getitem__
    DictConfig.pretty = lambda self, resolve=False: OmegaConf.to_yaml(self, resolve=resolve)

    from omegaconf.basecontainer import BaseContainer

    clear_resolvers = OmegaConf.clear_resolvers
    mmf_resolvers = {"device_count", "resolve_cache_dir", "resolve_dir"}

    def _register_env() -> None:
        if not OmegaConf.has_resolver("env"):
            OmegaConf.register_new_resolver("env", _legacy_env_resolver)

    def clear_then_keep_env() -> None:
        kept = {k: v for k, v in BaseContainer._resolvers.items() if k not in mmf_resolvers}
        clear_resolvers()
        BaseContainer._resolvers.update(kept)
        _register_env()

    OmegaConf.clear_resolvers = staticmethod(clear_then_keep_env)
    _register_env()


# Keys rc10 reads that the rc7 defaults.yaml (the newest one published) lacks,
# plus the switches this layer adds. Values are rc10's defaults.
RC10_DEFAULTS = {
    "training": {
        # rc10 sends stdout into its log file when true; false keeps progress on
        # the console (the log file is written either way).
        "stdout_capture": False,
        "detect_anomaly": False,
        # MMF main's mixed precision and its bf16 choice (the uvlp trainer reads them:
        # mmf_uvlp/training/mixed_precision.py)
        "fp16": False,
        "amp_dtype": "float16",
        # MMF main's: DataLoader workers kept alive across epochs (with num_workers > 0)
        "persistent_workers": True,
    },
    # the plugin's: replace another run's final checkpoint (mmf_uvlp.training.run_folder),
    # load a checkpoint that does not fit the run (mmf_uvlp.training.checkpoint_fit), resume
    # from a trusted legacy resume_file (mmf_uvlp.training.resumable_checkpoints)
    "checkpoint": {"reset": {"fp16_scaler": False}, "overwrite": False,
                   "accept_mismatch": False, "trust_resume_file": False},
    # MMF main's per-dataset mix of a multi-dataset run (the uvlp trainer's loaders:
    # mmf_uvlp/trainers/rc10_loaders.py)
    "multitasking": {"enabled": True, "type": "size_proportional", "params": {}},
}


@FIXES.fix(
    "rc10_default_config_keys",
    "ConfigAttributeError: Key 'stdout_capture' is not in struct (rc10 ships no "
    "yaml; the rc7 defaults.yaml installed by `make setup` lacks keys rc10 reads)",
    stage="post",
)
def _rc10_default_config_keys() -> None:
    from omegaconf import OmegaConf

    from mmf.utils.configuration import Configuration

    build_default_config = Configuration._build_default_config

    def _build_default_config(self: Configuration) -> Any:
        return OmegaConf.merge(OmegaConf.create(RC10_DEFAULTS), build_default_config(self))

    Configuration._build_default_config = _build_default_config


def _cuda_calls_on_module_device(forward: Callable) -> Callable:
    """Wrap ``forward`` so that ``Tensor.cuda()`` inside it moves to the module's device."""

    @functools.wraps(forward)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        with cuda_calls_to(next(self.parameters()).device):
            return forward(self, *args, **kwargs)

    return wrapped


@FIXES.fix(
    "hard_coded_cuda",
    "AssertionError: Torch not compiled with CUDA enabled (VisualBERT and ViLBERT "
    "call .cuda() inside forward; on CPU, or a GPU other than the current one, "
    "tensors now follow the model's parameters)",
    stage="post",
)
def _hard_coded_cuda() -> None:
    from mmf.models.vilbert import ViLBERT
    from mmf.models.visual_bert import VisualBERT

    for model in (VisualBERT, ViLBERT):
        model.forward = _cuda_calls_on_module_device(model.forward)


@FIXES.fix(
    "visual_bert_output_attentions",
    "ValueError: The `output_attentions` attribute is not supported when using the "
    "`attn_implementation` set to sdpa (VisualBERT with output_attentions: true on "
    "transformers 4.x); past it, attention_weights came back empty (transformers 4.x's "
    "BertEncoder returns maps only when the call asks, rc10 relied on the config) and "
    "VisualBERTBase returned the encoder's whole output as its sequence output, which "
    "the pretraining heads cannot take",
    stage="post",
)
def _visual_bert_output_attentions() -> None:
    import torch
    from mmf.models.visual_bert import VisualBERTBase

    init, forward = VisualBERTBase.__init__, VisualBERTBase.forward

    @functools.wraps(init)
    def patched_init(self: Any, config: Any, *args: Any, output_attentions: bool = False,
                     **kwargs: Any) -> None:
        if output_attentions:
            config._attn_implementation = "eager"
        init(self, config, *args, output_attentions=output_attentions, **kwargs)
        if output_attentions:
            self.encoder.forward = functools.partial(self.encoder.forward,
                                                     output_attentions=True)

    @functools.wraps(forward)
    def patched_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = forward(self, *args, **kwargs)
        if self.output_attentions and len(outputs) == 3 and not torch.is_tensor(outputs[0]):
            return (outputs[0][0],) + tuple(outputs[1:])  # the sequence output, as documented
        return outputs

    VisualBERTBase.__init__ = patched_init
    VisualBERTBase.forward = patched_forward


@FIXES.fix(
    "dataset_imdb_attribute",
    "AttributeError: 'NLVR2Dataset' object has no attribute 'imdb' (also the "
    "conceptual captions and masked datasets: rc10 renamed it annotation_db)",
    stage="post",
)
def _dataset_imdb_attribute() -> None:
    from mmf.datasets.mmf_dataset import MMFDataset

    MMFDataset.imdb = property(lambda self: self.annotation_db)


@FIXES.fix(
    "multi_dataset_loader_epoch_reset",
    "a multi-dataset run never leaves epoch 2 and its memory grows without bound "
    "(MultiDatasetLoader.__iter__ appends new iterators but never resets its "
    "finished/used-once bookkeeping, so change_dataloader spins forever); and "
    "evaluation over several datasets silently skips some of them (__next__ switches "
    "once after a StopIteration, possibly to another exhausted dataset, and ends)",
    stage="post",
)
def _multi_dataset_loader_epoch_reset() -> None:
    from mmf.datasets.multi_dataset_loader import MultiDatasetLoader

    iter_ = MultiDatasetLoader.__iter__

    @functools.wraps(iter_)
    def __iter__(self: MultiDatasetLoader) -> Any:
        self._iterators = []
        self._finished_iterators = {}
        self._used_once = {}
        return iter_(self)

    def __next__(self: MultiDatasetLoader) -> Any:
        while True:
            try:
                batch = next(self._chosen_iterator)
                break
            except StopIteration:
                if not self._proportional_sampling and len(self._used_once) == self.num_datasets:
                    raise
                self._finished_iterators[self.current_index] = 1
                if len(self._finished_iterators) == self.num_datasets:
                    raise
                self.change_dataloader()
        self._used_once[self.current_index] = 1
        return batch

    MultiDatasetLoader.__iter__ = __iter__
    MultiDatasetLoader.__next__ = __next__


@FIXES.fix(
    "anomaly_detection_switch",
    "training runs several times slower than it should (BaseTrainer.train "
    "hard-codes torch.autograd.set_detect_anomaly(True)); now the config switch "
    "training.detect_anomaly, off by default",
    stage="post",
)
def _anomaly_detection_switch() -> None:
    import torch

    from mmf.trainers.base_trainer import BaseTrainer

    train = BaseTrainer.train

    @functools.wraps(train)
    def train_with_configured_anomaly_detection(self: BaseTrainer) -> Any:
        wanted = bool(self.config.training.get("detect_anomaly", False))
        set_detect_anomaly = torch.autograd.set_detect_anomaly
        torch.autograd.set_detect_anomaly = lambda mode, *a, **k: set_detect_anomaly(wanted)
        try:
            return train(self)
        finally:
            torch.autograd.set_detect_anomaly = set_detect_anomaly

    BaseTrainer.train = train_with_configured_anomaly_detection


@FIXES.fix(
    "per_dataset_evaluation",
    "RuntimeError: Sizes of tensors must match ... in torch.cat (evaluation "
    "concatenates the scores of all datasets, so heads of different widths crash "
    "and metrics mix datasets); reports are now combined per dataset",
    stage="post",
)
def _per_dataset_evaluation() -> None:
    import torch
    from tqdm import tqdm

    from mmf.common.meter import Meter
    from mmf.trainers.base_trainer import BaseTrainer
    from mmf.utils.distributed import is_master

    def evaluate(
        self: BaseTrainer, loader: Any, use_tqdm: bool = False, single_batch: bool = False
    ) -> Any:
        meter = Meter()
        combined: Dict[str, Any] = {}
        with torch.no_grad():
            self.model.eval()
            for batch in tqdm(loader, disable=not use_tqdm or not is_master()):
                report = self._forward_pass(batch)
                self._update_meter(report, meter)
                previous = combined.get(report.dataset_name)
                if previous is None:
                    combined[report.dataset_name] = report
                else:
                    previous.accumulate_tensor_fields(report, self.metrics.required_params)
                    previous.batch_size += report.batch_size
                if single_batch:
                    break
            for report in combined.values():
                report.metrics = self.metrics(report, report)
                self._update_meter(report, meter, eval_mode=True)
            self.model.train()
        return report, meter

    BaseTrainer.evaluate = evaluate


@FIXES.fix(
    "cpu_distributed_gloo",
    "rc10's distributed path is CUDA-only: get_world_size() is 1 without NCCL, "
    "'AssertionError' (world size checked against the GPU count), all_reduce on "
    ".cuda() tensors and DDP only for CUDA models; on a CPU-only torch, processes "
    "now train in sync over gloo",
    stage="post",
)
def _cpu_distributed_gloo() -> None:
    import torch

    import mmf.utils.distributed as distributed
    from mmf.common.registry import registry
    from mmf.trainers.base_trainer import BaseTrainer

    distributed.dist = DistributedWithoutNCCL("torch.distributed")
    distributed_init = distributed.distributed_init

    @functools.wraps(distributed_init)
    def distributed_init_any_backend(config: Any) -> Any:
        if cpu_only():
            config.distributed.backend = "gloo"
            with cuda_calls_to("cpu"):
                return distributed_init(config)
        return distributed_init(config)

    distributed.distributed_init = distributed_init_any_backend

    set_device = BaseTrainer._set_device
    parallelize_model = BaseTrainer.parallelize_model

    def _set_device(self: BaseTrainer) -> None:
        set_device(self)
        if self.distributed and cpu_only():
            self.device = torch.device("cpu")
            registry.register("current_device", self.device)

    def _parallelize_model(self: BaseTrainer) -> None:
        parallelize_model(self)
        if self.distributed and self.device.type == "cpu":
            registry.register("distributed", True)
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.model,
                find_unused_parameters=self.config.training.find_unused_parameters,
            )

    BaseTrainer._set_device = _set_device
    BaseTrainer.parallelize_model = _parallelize_model


@FIXES.fix(
    "torchrun_local_rank",
    "with `torchrun --nproc_per_node=N mmf_run ...` every rank trains on cuda:0 (rc10 takes "
    "env:// from RANK / WORLD_SIZE / MASTER_ADDR but never reads LOCAL_RANK, and "
    "distributed_main sets device_id=0 for the one process it runs); each rank now uses "
    "the GPU torchrun gives it",
    stage="post",
    trigger="mmf_cli.run",
)
def _torchrun_local_rank() -> None:
    import mmf_cli.run as cli

    distributed_main = cli.distributed_main

    @functools.wraps(distributed_main)
    def distributed_main_on_local_rank(device_id: int, configuration: Any,
                                       predict: bool = False) -> Any:
        config = configuration.get_config()
        if config.distributed.get("no_spawn") and "LOCAL_RANK" in os.environ:
            device_id = int(os.environ["LOCAL_RANK"])
        return distributed_main(device_id, configuration, predict)

    cli.distributed_main = distributed_main_on_local_rank


@FIXES.fix(
    "quiet_known_warnings",
    "UserWarning: register_resolver() is deprecated / In the sequence "
    "`MMF_USER_DIR,` some elements are missing / The epoch parameter in "
    "`scheduler.step()` ... (noise from omegaconf 2.3 and torch on every run)",
)
def _quiet_known_warnings() -> None:
    for message in (
        r"register_resolver\(\) is deprecated",
        r"In the sequence `MMF_[A-Z_]+,` some elements are missing",
        r"The epoch parameter in `scheduler.step\(\)` was not necessary",
    ):
        warnings.filterwarnings("ignore", message=message)


@FIXES.fix(
    "max_updates_stop",
    "a run with training.max_updates=N makes N+1 updates (BaseTrainer.train stops "
    "only once num_updates > max_updates inside an epoch), so the scheduler, the "
    "last checkpoint and resumed schedules are off by one",
    stage="post",
)
def _max_updates_stop() -> None:
    from mmf.trainers.base_trainer import BaseTrainer

    logistics = BaseTrainer._logistics

    @functools.wraps(logistics)
    def _logistics(self: BaseTrainer, report: Any) -> bool:
        should_break = logistics(self, report)
        return should_break or self.num_updates >= self.max_updates

    BaseTrainer._logistics = _logistics


class _SharedLmdb(types.ModuleType):
    """The ``lmdb`` module as seen by MMF's feature readers: one environment per file and
    process, each DataLoader worker reading through its own."""

    def open(self, path: str, **kwargs: Any) -> Any:  # noqa: A003  (mirrors lmdb.open)
        from mmf_uvlp.utils import lmdb_envs

        return lmdb_envs.ProcessLocalEnvironment(path, **kwargs)

    def __getattr__(self, item: str) -> Any:
        import lmdb

        return getattr(lmdb, item)


@FIXES.fix(
    "shared_lmdb_environments",
    "lmdb.Error: ...: environment is already open in this process (py-lmdb >= 1.0 "
    "refuses a second open of one file, and rc10 opens one per dataset split, e.g. "
    "VQA2 train and val reading the same COCO features LMDB); with training.num_workers "
    "> 0 a reader opened before the workers started used its parent's environment in each "
    "forked worker (LMDB forbids it) and cannot be pickled for spawned ones (TypeError: "
    "cannot pickle 'Environment' object); each process now reads through its own",
    stage="post",
)
def _shared_lmdb_environments() -> None:
    import mmf.datasets.databases.readers.feature_readers as feature_readers

    feature_readers.lmdb = _SharedLmdb("lmdb")


def _real_rows(info: Any, feature: Any) -> int:
    """The real rows of a padded feature reader's output (its ``max_features``)."""
    count = info.get("max_features") if isinstance(info, dict) else None
    return feature.shape[0] if count is None else min(int(count), feature.shape[0])


class _RestrictedNumpy(types.ModuleType):
    """``numpy`` as seen by MMF's feature readers and annotation database: an object array
    in an ``.npy`` file is unpickled with the plugin's restricted unpickler."""

    def load(self, file: str, mmap_mode: Optional[str] = None, *args: Any, **kwargs: Any) -> Any:
        from mmf_uvlp.utils.safe_loading import load_npy

        return load_npy(file, mmap_mode)

    def __getattr__(self, item: str) -> Any:
        import numpy

        return getattr(numpy, item)


class _RestrictedPickle(types.ModuleType):
    """``pickle`` as seen by MMF's LMDB feature reader: plain data and numpy arrays only."""

    def loads(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        from mmf_uvlp.utils.safe_loading import restricted_loads

        return restricted_loads(data, "an LMDB value", arrays=True)

    def __getattr__(self, item: str) -> Any:
        import pickle

        return getattr(pickle, item)


@FIXES.fix(
    "feature_files_run_no_code",
    "a crafted feature file runs code (MMF's readers load `<name>.npy`, `<name>_info.npy` "
    "and imdb `.npy` files with np.load(allow_pickle=True) and LMDB values with "
    "pickle.loads; a feature_path such as ../../elsewhere/evil.npy leaves the features "
    "folder); a NaN feature trains silently into NaN weights; a truncated imdb .npy or "
    "LMDB value fails with `_pickle.UnpicklingError: pickle data was truncated` and a "
    "missing LMDB key with `KeyError: b'...'`, naming no file",
    stage="post",
)
def _feature_files_run_no_code() -> None:
    import mmf.datasets.databases.annotation_database as annotation_database
    import mmf.datasets.databases.readers.feature_readers as feature_readers
    import torch

    from mmf_uvlp.data_formats.errors import FormatError
    from mmf_uvlp.data_formats.mmf_features import non_finite
    from mmf_uvlp.utils.safe_loading import (
        OutsideFolderError, UnsafeFileError, resolve_inside, stays_inside,
    )

    feature_readers.np = _RestrictedNumpy("numpy")
    feature_readers.pickle = _RestrictedPickle("pickle")
    annotation_database.np = _RestrictedNumpy("numpy")
    FeatureReader = feature_readers.FeatureReader
    LMDBFeatureReader = feature_readers.LMDBFeatureReader
    read, load_lmdb = FeatureReader.read, LMDBFeatureReader._load

    def _read(self: Any, image_feat_path: str) -> Any:
        if image_feat_path.endswith("npy") and not self.base_path.endswith(".lmdb"):
            name = image_feat_path.split(".npy")[0]
            try:
                resolve_inside(self.base_path, image_feat_path)
                if os.path.lexists(os.path.join(self.base_path, f"{name}_info.npy")):
                    resolve_inside(self.base_path, f"{name}_info.npy")
            except OutsideFolderError as error:
                raise FormatError(self.base_path, "feature_path",
                                  stays_inside("the features folder", error.reason),
                                  error.name) from None
        result = read(self, image_feat_path)
        feature = result[0] if isinstance(result, tuple) else None
        if torch.is_tensor(feature) and feature.is_floating_point():
            feature = feature[:_real_rows(result[1], feature)]  # not the reader's padding
            finite = torch.isfinite(feature)
            if not bool(finite.all()):
                raise FormatError(self.base_path, "features", "finite values",
                                  non_finite(feature.numpy(), finite.numpy()),
                                  key=image_feat_path)
        return result

    def _load_lmdb(self: Any, image_file_path: str) -> Any:
        name = os.path.relpath(image_file_path, self.db_path).split(".npy")[0]
        try:
            return load_lmdb(self, image_file_path)
        except UnsafeFileError as error:
            raise UnsafeFileError(self.db_path, error.refused, error.allowed, key=name) from None
        except FormatError as error:
            raise FormatError(self.db_path, error.field, error.expected, error.got,
                              key=name) from None
        except KeyError:
            raise FormatError(self.db_path, "key", "an image key listed in its b'keys' entry",
                              name) from None

    FeatureReader.read = _read
    LMDBFeatureReader._load = _load_lmdb


@FIXES.fix(
    "model_and_datasets_from_config_file",
    "KeyError: Required argument 'model' not passed / 'dataset|datasets' not passed "
    "(rc10 reads model and datasets only from the command line, so "
    "`mmf_run config=projects/uvla/pretrain.yaml` fails although the file names both); "
    "the command line still wins",
    stage="post",
)
def _model_and_datasets_from_config_file() -> None:
    from mmf.utils.configuration import Configuration

    build_model_config = Configuration._build_model_config
    build_dataset_config = Configuration._build_dataset_config

    def _from_file(self: Configuration, opts_config: Any, keys: tuple) -> None:
        if all(opts_config.get(key) is None for key in keys):
            for key in keys:
                if self._user_config.get(key) is not None:
                    opts_config[key] = self._user_config.get(key)

    def _build_model_config(self: Configuration, opts_config: Any) -> Any:
        _from_file(self, opts_config, ("model",))
        return build_model_config(self, opts_config)

    def _build_dataset_config(self: Configuration, opts_config: Any) -> Any:
        _from_file(self, opts_config, ("dataset", "datasets"))
        dataset_config = build_dataset_config(self, opts_config)
        if self._user_config.get("dataset") is not None and not self._user_config.get("datasets"):
            # the final config reads `datasets`; a file naming one `dataset` must set it too
            self._user_config["datasets"] = self._user_config.get("dataset")
        return dataset_config

    Configuration._build_model_config = _build_model_config
    Configuration._build_dataset_config = _build_dataset_config


def _data_dir_from_working_directory(update_specific: Callable) -> Callable:
    """Wrap ``Configuration._update_specific`` so that a relative ``env.data_dir`` is made
    absolute against the working directory before anything joins it to MMF's root."""

    @functools.wraps(update_specific)
    def _update_specific(self: Any, config: Any) -> Any:
        from omegaconf import OmegaConf

        data_dir = OmegaConf.select(config, "env.data_dir", default=None)
        if isinstance(data_dir, str) and data_dir and "://" not in data_dir \
                and not os.path.isabs(data_dir):
            config.env.data_dir = os.path.abspath(os.path.expanduser(data_dir))
        return update_specific(self, config)

    return _update_specific


@FIXES.fix(
    "relative_data_dir",
    "RuntimeError: Vocab file .../site-packages/mmf/<env.data_dir>/.../answers_vqa.txt "
    "... doesn't exist (MMF's VocabFromText and Vocab join a relative env.data_dir to "
    "MMF's package folder, so `env.data_dir=data/...` run from a project folder fails); "
    "a relative env.data_dir is now taken from the working directory",
    stage="post",
)
def _relative_data_dir() -> None:
    from mmf.utils.configuration import Configuration

    Configuration._update_specific = _data_dir_from_working_directory(
        Configuration._update_specific)


def _rows_per_sample(values: Any, rows: int) -> Any:
    """Per-sample ``(n_i, C)`` arrays as one ``(B, rows, C)`` float32 array, each sample's
    rows truncated to ``rows`` or zero-padded up to it."""
    import numpy as np

    arrays = [np.asarray(value, dtype=np.float32) for value in values]
    arrays = [array.reshape(array.shape[0], -1) for array in arrays]
    width = max((array.shape[1] for array in arrays), default=0)
    padded = np.zeros((len(arrays), rows, width), dtype=np.float32)
    for index, array in enumerate(arrays):
        count = min(rows, array.shape[0])
        padded[index, :count] = array[:count]
    return padded


def _pad_image_info(holder: Any) -> None:
    """Make ``holder.image_info_0``'s ``bbox`` and ``cls_prob`` (B, R, ·), R being the
    feature rows of ``holder.image_feature_0``."""
    if holder is None or holder.get("image_feature_0") is None:
        return
    info = holder.get("image_info_0")
    if info is None:
        return
    rows = holder["image_feature_0"].size(-2)
    for key in ("bbox", "cls_prob"):
        if info.get(key) is not None:
            info[key] = _rows_per_sample(info[key], rows)


@FIXES.fix(
    "vilbert_variable_region_counts",
    "ValueError: setting an array element with a sequence. The requested array has an "
    "inhomogeneous shape after 1 dimensions (ViLBERT.get_image_and_text_features stacks "
    "the image_info bbox / cls_prob of a batch with np.array, so images with different "
    "region counts, or more boxes than max_features, cannot be batched); they are now "
    "padded or cut to the feature rows, as MMF's reader does with the features",
    stage="post",
)
def _vilbert_variable_region_counts() -> None:
    from mmf.models.vilbert import ViLBERT

    read = ViLBERT.get_image_and_text_features

    @functools.wraps(read)
    def get_image_and_text_features(self: Any, sample_list: Any) -> Dict[str, Any]:
        for holder in (sample_list, sample_list.get("img0"), sample_list.get("img1")):
            _pad_image_info(holder)
        return read(self, sample_list)

    ViLBERT.get_image_and_text_features = get_image_and_text_features


@FIXES.fix(
    "vilbert_nlvr2_pairs",
    "NLVR2 with ViLBERT classifies each example from the wrong images, silently "
    "(get_image_and_text_features stacks [all first images; all second images] but the "
    "nlvr2 head pairs pooled rows 2i and 2i+1, i.e. the first images of two different "
    "examples); the rows are now interleaved so that row pairs are an example's two images",
    stage="post",
)
def _vilbert_nlvr2_pairs() -> None:
    import torch
    from mmf.models.vilbert import ViLBERT

    read = ViLBERT.get_image_and_text_features

    @functools.wraps(read)
    def get_image_and_text_features(self: Any, sample_list: Any) -> Dict[str, Any]:
        params = read(self, sample_list)
        batch = sample_list["input_ids"].size(0)
        if params["input_ids"].size(0) != 2 * batch:
            return params
        first = torch.arange(batch, device=params["input_ids"].device)
        order = torch.stack([first, first + batch], dim=1).view(-1)  # 0, B, 1, B+1, ...
        return {key: value.index_select(0, order.to(value.device))
                if torch.is_tensor(value) and value.size(0) == 2 * batch else value
                for key, value in params.items()}

    ViLBERT.get_image_and_text_features = get_image_and_text_features


@FIXES.fix(
    "vilbert_random_init",
    "TypeError: 'NoneType' object is not subscriptable (ViLBERT with bert_model_name: "
    "null, the random initialisation rc10 documents in init_weights, calls "
    "ViLBERTBase.from_pretrained(None)); such a ViLBERT is now built randomly initialised",
    stage="post",
)
def _vilbert_random_init() -> None:
    from mmf.models.vilbert import ViLBERTBase

    from_pretrained = ViLBERTBase.from_pretrained.__func__

    @functools.wraps(from_pretrained)
    def from_pretrained_or_random(cls: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        if name is None:
            return cls(kwargs["config"])
        return from_pretrained(cls, name, *args, **kwargs)

    ViLBERTBase.from_pretrained = classmethod(from_pretrained_or_random)
