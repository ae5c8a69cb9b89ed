"""Fixes for MMF 1.0.0rc10 on Python 3.11, torch 2.x, transformers 4.57, omegaconf 2.3.

Each fix names the exact error it repairs. "pre" fixes run before MMF's code is
executed (they make its imports succeed); "post" fixes patch MMF's classes once
``import mmf`` finished. Nothing here edits MMF's files. This module holds the
registrations; a body longer than a few lines lives in the module of its concern
(``transformers_2x``, ``torchtext_stub``, ``omegaconf_2_0``, ``configuration``,
``visual_bert``, ``vilbert``, ``multi_dataset_loader``, ``distributed``,
``feature_readers``), shared with ``mmf_main.py`` where MMF main kept rc10's code.

The plugin's own training behaviour is not here: it is the ``uvlp`` trainer
(``mmf_uvlp.trainers``), which a run chooses with ``training.trainer: uvlp``; its behaviour
at MMF's command line is in ``mmf_uvlp.training.entry_point``.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import importlib
import sys
import types
from typing import Any, Callable

from mmf_uvlp.compat.fix import FixSet
from mmf_uvlp.compat import (
    configuration,
    distributed,
    feature_readers,
    multi_dataset_loader,
    omegaconf_2_0,
    predictions,
    torchtext_stub,
    transformers_2x,
    vilbert,
    visual_bert,
)
from mmf_uvlp.training.cpu_distributed import cuda_calls_to

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


FIXES.fix(
    "transformers_2x_module_paths",
    "ModuleNotFoundError: No module named 'transformers.tokenization_auto' "
    "(rc10 imports transformers 2.x flat modules, BertLayerNorm and "
    "transformers.optimization.AdamW, all removed in transformers 4.x/5.x)",
)(transformers_2x.alias_module_paths)


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


FIXES.fix(
    "torchtext_stub",
    "ModuleNotFoundError: No module named 'torchtext' (mmf/utils/vocab.py imports it; "
    "its binary no longer loads on torch 2.x, so setup does not install it; rc10 "
    "needs it only for torchtext's GloVe downloads)",
)(torchtext_stub.install)


FIXES.fix(
    "omegaconf_2_0_semantics",
    "ConfigAttributeError: Missing key learning_rate / ConfigAttributeError: Missing "
    "key pretty (checkpoint's config.yaml) / UnsupportedInterpolationType: Unsupported "
    "interpolation type env (rc10 was written for omegaconf 2.0, and its "
    "Configuration clears every resolver, plugins' included, e.g. uvlp_bert)",
)(omegaconf_2_0.restore_semantics)


FIXES.fix(
    "rc10_default_config_keys",
    "ConfigAttributeError: Key 'stdout_capture' is not in struct (rc10 ships no "
    "yaml; the rc7 defaults.yaml installed by `make setup` lacks keys rc10 reads)",
    stage="post",
)(configuration.default_config_keys)


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


FIXES.fix(
    "visual_bert_output_attentions",
    "ValueError: The `output_attentions` attribute is not supported when using the "
    "`attn_implementation` set to sdpa (VisualBERT with output_attentions: true on "
    "transformers 4.x); past it, attention_weights came back empty (transformers 4.x's "
    "BertEncoder returns maps only when the call asks, rc10 relied on the config) and "
    "VisualBERTBase returned the encoder's whole output as its sequence output, which "
    "the pretraining heads cannot take",
    stage="post",
)(visual_bert.output_attentions)


@FIXES.fix(
    "dataset_imdb_attribute",
    "AttributeError: 'NLVR2Dataset' object has no attribute 'imdb' (also the "
    "conceptual captions and masked datasets: rc10 renamed it annotation_db)",
    stage="post",
)
def _dataset_imdb_attribute() -> None:
    from mmf.datasets.mmf_dataset import MMFDataset

    MMFDataset.imdb = property(lambda self: self.annotation_db)


FIXES.fix(
    "multi_dataset_loader_epoch_reset",
    "a multi-dataset run never leaves epoch 2 and its memory grows without bound "
    "(MultiDatasetLoader.__iter__ appends new iterators but never resets its "
    "finished/used-once bookkeeping, so change_dataloader spins forever); and "
    "evaluation over several datasets silently skips some of them (__next__ switches "
    "once after a StopIteration, possibly to another exhausted dataset, and ends)",
    stage="post",
)(multi_dataset_loader.reset_each_epoch)


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


FIXES.fix(
    "cpu_distributed_gloo",
    "rc10's distributed path is CUDA-only: get_world_size() is 1 without NCCL, "
    "'AssertionError' (world size checked against the GPU count), all_reduce on "
    ".cuda() tensors and DDP only for CUDA models; on a CPU-only torch, processes "
    "now train in sync over gloo",
    stage="post",
)(distributed.gloo_on_cpu)


FIXES.fix(
    "torchrun_local_rank",
    "with `torchrun --nproc_per_node=N mmf_run ...` every rank trains on cuda:0 (rc10 takes "
    "env:// from RANK / WORLD_SIZE / MASTER_ADDR but never reads LOCAL_RANK, and "
    "distributed_main sets device_id=0 for the one process it runs); each rank now uses "
    "the GPU torchrun gives it",
    stage="post",
    trigger="mmf_cli.run",
)(distributed.torchrun_local_rank)


FIXES.fix(
    "shared_lmdb_environments",
    "lmdb.Error: ...: environment is already open in this process (py-lmdb >= 1.0 "
    "refuses a second open of one file, and rc10 opens one per dataset split, e.g. "
    "VQA2 train and val reading the same COCO features LMDB); with training.num_workers "
    "> 0 a reader opened before the workers started used its parent's environment in each "
    "forked worker (LMDB forbids it) and cannot be pickled for spawned ones (TypeError: "
    "cannot pickle 'Environment' object); each process now reads through its own",
    stage="post",
)(feature_readers.shared_lmdb_environments)


FIXES.fix(
    "feature_files_run_no_code",
    "a crafted feature file runs code (MMF's readers load `<name>.npy`, `<name>_info.npy` "
    "and imdb `.npy` files with np.load(allow_pickle=True) and LMDB values with "
    "pickle.loads; a feature_path such as ../../elsewhere/evil.npy leaves the features "
    "folder); a NaN feature trains silently into NaN weights; a truncated imdb .npy or "
    "LMDB value fails with `_pickle.UnpicklingError: pickle data was truncated` and a "
    "missing LMDB key with `KeyError: b'...'`, naming no file",
    stage="post",
)(feature_readers.read_as_data_only)


FIXES.fix(
    "model_and_datasets_from_config_file",
    "KeyError: Required argument 'model' not passed / 'dataset|datasets' not passed "
    "(rc10 reads model and datasets only from the command line, so "
    "`mmf_run config=projects/uvla/pretrain.yaml` fails although the file names both); "
    "the command line still wins",
    stage="post",
)(configuration.model_and_datasets_from_file)


FIXES.fix(
    "relative_data_dir",
    "RuntimeError: Vocab file .../site-packages/mmf/<env.data_dir>/.../answers_vqa.txt "
    "... doesn't exist (MMF's VocabFromText and Vocab join a relative env.data_dir to "
    "MMF's package folder, so `env.data_dir=data/...` run from a project folder fails); "
    "a relative env.data_dir is now taken from the working directory",
    stage="post",
)(configuration.relative_data_dir)


FIXES.fix(
    "vilbert_variable_region_counts",
    "ValueError: setting an array element with a sequence. The requested array has an "
    "inhomogeneous shape after 1 dimensions (ViLBERT.get_image_and_text_features stacks "
    "the image_info bbox / cls_prob of a batch with np.array, so images with different "
    "region counts, or more boxes than max_features, cannot be batched); they are now "
    "padded or cut to the feature rows, as MMF's reader does with the features",
    stage="post",
)(vilbert.pad_region_counts)


FIXES.fix(
    "vilbert_nlvr2_pairs",
    "NLVR2 with ViLBERT classifies each example from the wrong images, silently "
    "(get_image_and_text_features stacks [all first images; all second images] but the "
    "nlvr2 head pairs pooled rows 2i and 2i+1, i.e. the first images of two different "
    "examples); the rows are now interleaved so that row pairs are an example's two images",
    stage="post",
)(vilbert.pair_nlvr2_images)


FIXES.fix(
    "vilbert_random_init",
    "TypeError: 'NoneType' object is not subscriptable (ViLBERT with bert_model_name: "
    "null, the random initialisation rc10 documents in init_weights, calls "
    "ViLBERTBase.from_pretrained(None)); such a ViLBERT is now built randomly initialised",
    stage="post",
)(vilbert.random_init)


FIXES.fix(
    "nlvr2_ve_predictions",
    "AttributeError: 'NLVR2Dataset' object has no attribute 'answer_processor' (mmf_predict "
    "on nlvr2 or visual_entailment: both inherit VQA2's format_for_prediction, which reads "
    "an answer vocabulary and question_id they lack); their samples now carry an id and "
    "each writes one prediction per item named by its annotation's identifier",
    stage="post",
)(predictions.nlvr2_and_visual_entailment_predictions)


@FIXES.fix(
    "quiet_known_warnings",
    "every mmf_run prints UserWarning: register_resolver() is deprecated / In the sequence "
    "`MMF_USER_DIR,` some elements are missing / The epoch parameter in "
    "`scheduler.step()` ... (rc10's calls of omegaconf 2.0 and torch 1.x APIs, noise of "
    "this stack); mmf_run's output now leaves them out",
    stage="post",
    trigger="mmf_cli.run",
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
