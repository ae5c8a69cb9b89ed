"""μ-VLA: a single-stream BERT over [text or tag tokens; region tokens] (MMF model ``uvla``).

Reads top to bottom: inputs -> embeddings -> BERT encoder -> heads -> curriculum weights.

- The BERT (embedding tables, encoder, pooler and, when the checkpoint has one, the MLM
  head) comes from ``bert_model_name``, a local folder (e.g. the packaged MiniLM), or is
  randomly initialised from ``bert_config`` when ``bert_model_name`` is null.
- Attention runs through PyTorch's fused ``scaled_dot_product_attention`` (``attention:
  sdpa``); when attention maps are requested (``output_attentions: true`` or
  ``forward(sample_list, output_attentions=True)``) the layers fall back to the eager
  implementation, which computes the same thing and returns the maps.
- Heads are chosen by name (``heads``, see :mod:`mmf_uvlp.modules.heads`); each computes
  its outputs only when the batch carries its targets. Losses are MMF loss modules
  (``uvla_mlm`` ...) listed in ``losses``.
- The curriculum (``curriculum``) adds ``curriculum_weights`` (B,) to the output for
  batches with a ``curriculum_weighted`` field; the losses weight each sample with it. Once
  active, the weight is the ITM match probability of the *clean* pair (``clean_input_ids``,
  ``clean_region_features``, a no-grad pass), not of the masked input the losses see: an
  R-N input has its linked phrases or regions removed, and the ITM head never trains on one.

Batch fields read (B batch, L text length, R regions, D feature dim): ``input_ids``,
``input_mask``, ``segment_ids`` (B, L); optional ``text_boxes`` (B, L, 5) and
``text_is_tag`` (B, L) for tag tokens; ``region_features`` (B, R, D), ``region_boxes``
(B, R, 5), ``region_mask`` (B, R) — or MMF's ``image_feature_0`` with ``region_boxes``
and ``region_mask`` or else ``image_info_0`` (``max_features``, ``bbox`` pixels on the host,
``image_width``, ``image_height``: the batch's boxes are normalised on the host and copied
to the device once), and for pairs
(NLVR2) ``img0`` / ``img1`` each holding those. With ``text_only_batches: true`` a batch
without any region field (U-VisualBERT's text batches) encodes its text alone (R = 0).
The model takes finished tensors: a batch of the plugin's datasets
(:mod:`mmf_uvlp.datasets.collate`) has its original features rebuilt, and its resident
features made, by the dataset's ``prepare_batch`` before it gets here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from omegaconf import OmegaConf
from torch import nn
from transformers import BertConfig, BertForPreTraining

from mmf.common.registry import registry
from mmf.models.base_model import BaseModel
from mmf.modules.losses import Losses
from mmf_uvlp.batch import ragged
from mmf_uvlp.losses.curriculum import CurriculumWeighting
from mmf_uvlp.models.head_spec import head_spec
from mmf_uvlp.utils.boxes import batch_normalized_boxes
from mmf_uvlp.modules.embeddings import BOX_DIM, UVLAEmbeddings
from mmf_uvlp.modules.heads import (
    Encoded,
    FeatureRegressionHead,
    MaskedTokenHead,
    MatchingHead,
    PairClassifierHead,
    PhraseTokenHead,
    PooledClassifierHead,
    RegionClassHead,
    RegionScorerHead,
)
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.modules.pooling import check_pooling, pool
from mmf_uvlp.trainers.progress import current_epoch, registered_train_samples, updates_done
from mmf_uvlp.trainers.throughput import compile_in_place, mark_cuda_graph_step
from mmf_uvlp.utils.bert_source import load_or_explain
from mmf_uvlp.utils.config_files import default_config
from mmf_uvlp.utils.run_log import write_run_log
from mmf_uvlp.utils.safe_loading import load_checkpoint

ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")
PRETRAINING_HEADS = ("mlm", "mrc", "mrfr", "pmrtc", "itm")
TASK_HEADS = ("pooled_classifier", "pair_classifier", "region_scorer")
VOCAB_HEADS = ("mlm", "pmrtc")
PRETRAINED_PARTS = ("embeddings.", "encoder.", "pooler.")


def read_uvla_state(
    path: str, trust: bool = False, trust_hint: str = ""
) -> Dict[str, torch.Tensor]:
    """The weights of a uvla checkpoint: an MMF ``.ckpt`` (weights under ``model``) or a
    state dict (``uvla_final.pth``), with DistributedDataParallel's ``module.`` removed.

    Loaded with ``weights_only`` (tensors and plain data: nothing in the file runs); a
    legacy file holding other objects needs ``trust`` (``trust_hint``: how a user sets it).
    """
    state = load_checkpoint(path, trust=trust, trust_hint=trust_hint)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    elif isinstance(state, dict) and isinstance(state.get("state_dict"), dict):  # Lightning .ckpt
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ValueError(
            f"{path}: expected a state dict or an MMF checkpoint, found {type(state).__name__}"
        )
    return {key.removeprefix("module."): value for key, value in state.items()}


def _twice(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``[tensor; tensor]`` along the batch (the sentence of an image pair)."""
    return None if tensor is None else torch.cat([tensor, tensor])


@dataclass
class ModelInputs:
    """The tensors the encoder consumes (pairs already flattened to 2B)."""

    input_ids: torch.Tensor  # (B, L)
    input_mask: torch.Tensor  # (B, L)
    segment_ids: torch.Tensor  # (B, L)
    text_boxes: Optional[torch.Tensor]  # (B, L, 5)
    text_is_tag: Optional[torch.Tensor]  # (B, L)
    region_features: torch.Tensor  # (B, R, D)
    region_boxes: torch.Tensor  # (B, R, 5)
    region_mask: torch.Tensor  # (B, R)


def _is_number(value: Any) -> bool:
    """Whether a config value is an int or a float (not a bool, not a string)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _without_targets(head: str, result: Mapping[str, Any], batch: Mapping[str, Any]) -> bool:
    """Whether a head's ``result`` has nothing for its loss in ``batch``: no selected token or
    region (``*_index`` with no rows), or, for ``itm``, no applicable label."""
    indices = [value for key, value in result.items() if key.endswith("_index")]
    if indices:
        return all(index.size(0) == 0 for index in indices)
    if head == "itm":
        applicable = ragged(batch, "itm_label_index")  # a collated batch's, from the host
        if applicable is not None:
            return applicable.size(0) == 0
        labels = batch.get("itm_label")
        return labels is None or not bool((labels != -1).any())
    return False


def dropped_heads_message(not_copied: Sequence[str], own_heads: Mapping[str, Any]) -> str:
    """What a fine-tuning start leaves out of the pre-trained file on purpose: its heads
    (``heads.<name>.*``), by name, and the heads this model trains instead."""
    names: List[str] = []
    for key in not_copied:
        parts = key.split(".")
        name = parts[1] if parts[0] == "heads" and len(parts) > 1 else parts[0]
        if name not in names:
            names.append(name)
    dropped = (
        f"dropped on purpose: its heads {', '.join(names)} ({len(not_copied)} tensors)"
        if names
        else "it holds no heads"
    )
    return f"{dropped}; this run trains its own: {', '.join(own_heads) or 'none'}"


@registry.register_model("uvla")
class UVLA(BaseModel):
    """μ-VLA pre-training (and fine-tuning) model; ``config`` is ``model_config.uvla``."""

    config_key = "uvla"  # the registered name: messages name model_config.<config_key>

    def __init__(self, config: Any):
        super().__init__(config)
        self.config = config

    @classmethod
    def config_path(cls) -> str:
        return default_config("models", "uvla", "defaults.yaml")

    # ----------------------------------------------------------------- build
    def build(self) -> None:
        attention = self.config.get("attention", "sdpa")
        if attention not in ATTENTION_IMPLEMENTATIONS:
            raise UserConfigError(
                f"model_config.{self.config_key}.attention must be one of "
                f"{ATTENTION_IMPLEMENTATIONS}, "
                f"got {attention!r}"
            )
        bert = self._load_bert(attention)
        self.bert_config = bert.config
        self.output_attentions = bool(self.config.get("output_attentions", False))
        self.feature_dim = self._whole_number("feature_dim", self._required("feature_dim"), 1)
        self.text_only_batches = bool(self.config.get("text_only_batches", False))

        self.embeddings = self._build_embeddings(bert)
        self.encoder = bert.bert.encoder
        self.pooler = bert.bert.pooler
        self.pooling = check_pooling(self.config.get("pooling", "cls"), self.config_key)
        self.head_spec = head_spec(self.config, self.config_key)
        self.heads = nn.ModuleDict(
            {name: self._build_head(name, bert) for name in self._head_names()}
        )
        self._init_new_weights(bert)
        self._visual_lr_multiplier()  # a bad value fails at build, not at the optimizer
        self.curriculum = self._build_curriculum()
        self._cuda_graphs = False  # compile_for_training's reduce-overhead mode

        self.pretrained_report: Optional[Dict[str, Any]] = None
        pretrained = self.config.get("pretrained_checkpoint", None)
        if pretrained:
            self._load_pretrained(str(pretrained))

    def compile_for_training(self, mode: str) -> bool:
        """``torch.compile`` the encoder in place in ``mode`` (the trainer calls this for
        ``training.compile``); with ``reduce-overhead`` each forward pass then begins a new
        step of CUDA graphs. Returns whether it was compiled (False: it runs eagerly)."""
        compiled = compile_in_place(self.encoder, f"{self.config_key}'s encoder", mode)
        self._cuda_graphs = compiled and mode == "reduce-overhead"
        return compiled

    def _build_embeddings(self, bert: BertForPreTraining) -> nn.Module:
        """The input embeddings: BERT's word embeddings beside the region path."""
        return UVLAEmbeddings(
            bert.bert.embeddings,
            feature_dim=self.feature_dim,
            visual_token_type=self._whole_number(
                "visual_token_type",
                self.config.get("visual_token_type", 1),
                0,
                bert.config.type_vocab_size - 1,
            ),
            layer_norm_eps=bert.config.layer_norm_eps,
            dropout=bert.config.hidden_dropout_prob,
        )

    def _init_new_weights(self, bert: BertForPreTraining) -> None:
        """BERT's initialisation for what a BERT checkpoint does not have: the embeddings'
        new modules and the heads other than BERT's vocabulary heads."""
        new_modules = self.embeddings.new_modules()
        new_modules += [head for name, head in self.heads.items() if name not in VOCAB_HEADS]
        for module in new_modules:
            module.apply(bert._init_weights)

    def _build_curriculum(self) -> Optional[CurriculumWeighting]:
        """The w_ITM curriculum: on when ``curriculum.enabled`` (None: when there is an ITM
        head)."""
        curriculum = self.config.get("curriculum", {}) or {}
        enabled = curriculum.get("enabled", None)
        if not (enabled or (enabled is None and "itm" in self.heads)):
            return None
        if "itm" not in self.heads:
            raise UserConfigError(
                f"model_config.{self.config_key}.curriculum.enabled needs the 'itm' head, "
                f"and the heads are {list(self.heads)} (from {self.head_spec.source}): set "
                f"model_config.{self.config_key}.curriculum.enabled=False (or None: on "
                "exactly when the heads include itm)"
            )
        start_epoch = curriculum.get("start_epoch", 1)
        if not (_is_number(start_epoch) and float(start_epoch) >= 0):
            raise UserConfigError(
                f"model_config.{self.config_key}.curriculum.start_epoch must be a number of "
                f"epochs >= 0, got {start_epoch!r}"
            )
        return CurriculumWeighting(float(start_epoch), epoch_fn=self.epochs_done)

    def epochs_done(self) -> float:
        """Training progress in epochs, the curriculum's clock (MMF's update count, or
        Lightning's when MMF main's ``lightning`` trainer runs this model)."""
        return current_epoch(module=self)

    def _explain_idle_heads(self, sample_list: Mapping[str, Any], idle: List[str]) -> None:
        """At the first training batch of each dataset, a log line naming the heads it has
        no targets for: MMF logs every loss for every dataset, and such a loss logs 0.0000
        there, which says nothing about the model."""
        dataset = str(sample_list.get("dataset_name", "?"))
        explained = self.__dict__.setdefault("_idle_heads_explained", set())
        if dataset in explained:
            return
        explained.add(dataset)
        losses = [
            str(loss["type"])
            for loss in self.head_spec.losses
            if any(str(loss["type"]).endswith(name) for name in idle)
        ]
        write_run_log(
            f"{self.config_key}: the first batch of {dataset} has no targets of the "
            f"heads {', '.join(idle)}: {', '.join(losses) or 'their losses'} log 0.0000 "
            f"in {dataset}'s rows for batches without their targets (MMF logs every "
            "loss for every dataset)"
        )

    def _log_curriculum(self, weights: torch.Tensor, weighted: torch.Tensor, active: bool) -> None:
        """The curriculum's lines of this training step in the run's log (its switch, its
        w_ITM statistics every ``training.log_interval`` updates)."""
        config = registry.get("config", no_warning=True)
        every = int(config.training.get("log_interval", 0)) if config is not None else 0
        update = updates_done(module=self) + 1  # the update this step belongs to
        for line in self.curriculum.log_lines(
            weights, weighted, active, update, self.epochs_done(), every
        ):
            write_run_log(line)

    def visual_parameters(self) -> List[nn.Parameter]:
        """The region path's own parameters: the embeddings' modules a BERT checkpoint does
        not have (uvla: feature and box projections and their norms)."""
        return [p for module in self.embeddings.new_modules() for p in module.parameters()]

    def _visual_lr_multiplier(self) -> float:
        value = float(self.config.get("visual_lr_multiplier", 1.0))
        if value <= 0:
            raise UserConfigError(
                f"model_config.{self.config_key}.visual_lr_multiplier must be > 0, got {value}"
            )
        return value

    def get_optimizer_parameters(self, config: Any) -> Any:
        """MMF's optimizer parameters: one group, or the region path at
        ``visual_lr_multiplier`` × ``optimizer.params.lr`` beside the rest (models without
        the option in their config, such as ``vl_bert``, train as one group)."""
        multiplier = self._visual_lr_multiplier()
        if multiplier == 1.0:
            return self.parameters()
        visual = self.visual_parameters()
        ids = {id(p) for p in visual}
        rest = [p for p in self.parameters() if id(p) not in ids]
        lr = float(config.optimizer.params.lr) * multiplier
        return [{"params": rest}, {"params": visual, "lr": lr}]

    def _whole_number(
        self, key: str, value: Any, minimum: int, maximum: Optional[int] = None
    ) -> int:
        """``model_config.<config_key>.<key>`` = ``value``, a whole number in
        [``minimum``, ``maximum``]."""
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise UserConfigError(
                f"model_config.{self.config_key}.{key} must be a whole number {bounds}, "
                f"got {value!r}"
            )
        return value

    def _required(self, key: str) -> Any:
        value = self.config.get(key, None)
        if value is None:
            raise UserConfigError(f"model_config.{self.config_key}.{key} must be set")
        return value

    def _load_bert(self, attention: str) -> BertForPreTraining:
        """BERT + its MLM head: from a local folder, or random from ``bert_config``."""
        name = self.config.get("bert_model_name", None)
        if name is None:
            sizes = self.config.get("bert_config", None)
            if sizes is None:
                raise UserConfigError(
                    f"model_config.{self.config_key}: bert_model_name is null, so bert_config "
                    "(vocab_size, hidden_size, num_hidden_layers, num_attention_heads, "
                    "intermediate_size) "
                    "must be set"
                )
            if OmegaConf.is_config(sizes):
                sizes = OmegaConf.to_container(sizes, resolve=True)
            return BertForPreTraining(BertConfig(**sizes, attn_implementation=attention))
        overrides = {}
        layers = self.config.get("bert_layers", None)
        if layers is not None:
            overrides["num_hidden_layers"] = int(layers)  # keeps the first `layers` layers
        return load_or_explain(
            lambda source: BertForPreTraining.from_pretrained(
                source, attn_implementation=attention, **overrides
            ),
            str(name),
            f"model_config.{self.config_key}.bert_model_name",
            ("config", "weights"),
        )

    def _head_names(self) -> List[str]:
        names = self.head_spec.heads
        unknown = [n for n in names if n not in PRETRAINING_HEADS + TASK_HEADS]
        if unknown:
            raise UserConfigError(
                f"model_config.{self.config_key}.heads: unknown {unknown}; expected names from "
                f"{PRETRAINING_HEADS + TASK_HEADS}"
            )
        if sum(n in TASK_HEADS for n in names) > 1:
            raise UserConfigError(
                f"model_config.{self.config_key}.heads: at most one of {TASK_HEADS} "
                "(each writes 'scores')"
            )
        return names

    def _num_labels(self) -> int:
        """``num_labels``, or the registry value named by ``num_labels_from`` (the head
        spec's: the config's, or the task's).

        MMF's builders register their answer-space size (e.g. vqa2 registers
        ``vqa2_num_final_outputs`` from its answer vocabulary) before the model is built.
        """
        if self.head_spec.num_labels is not None:
            return int(self.head_spec.num_labels)
        key = self.head_spec.num_labels_from
        value = registry.get(key, no_warning=True) if key else None
        if value is None:
            raise UserConfigError(
                f"model_config.{self.config_key}: set num_labels, or num_labels_from to a "
                "registry key "
                f"a dataset builder registers (got num_labels_from={key!r}, not registered)"
            )
        return int(value)

    def init_losses(self) -> None:
        """MMF's losses of the head spec (``losses``, or the task's when ``heads`` is null)."""
        self.losses = Losses(self.head_spec.losses)

    # ------------------------------------------------------ pre-trained weights
    def _load_pretrained(self, path: str) -> None:
        """Copy a pre-trained uvla's embeddings, encoder and pooler into this model.

        ``path``: an MMF checkpoint (``*.ckpt``, weights under ``model``; MMF main's
        Lightning trainer: under ``state_dict``) or a state dict (``uvla_final.pth``), loaded
        with ``weights_only`` unless ``trust_checkpoint`` is true. Heads are never copied
        (fine-tuning has its own). Any
        missing or unexpected key inside those parts is an error: a silently partial
        initialisation would make Base-vs-pre-trained comparisons meaningless.
        The outcome is kept in ``self.pretrained_report``.
        """
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"model_config.{self.config_key}.pretrained_checkpoint={path!r} does not "
                "exist: run "
                "pre-training first (make pretrain) or set it to null for the BERT init"
            )
        trust_key = f"model_config.{self.config_key}.trust_checkpoint"
        state = read_uvla_state(
            path,
            bool(self.config.get("trust_checkpoint", False)),
            trust_hint=f"set {trust_key}=True (it may then run code)",
        )
        wanted = {key: value for key, value in state.items() if key.startswith(PRETRAINED_PARTS)}
        if not wanted:
            raise UserConfigError(
                f"{path}: no {PRETRAINED_PARTS} weights; expected a checkpoint of the "
                f"{self.config_key} model"
            )
        try:
            result = nn.Module.load_state_dict(self, wanted, strict=False)
        except RuntimeError as error:
            raise UserConfigError(
                f"{path}: does not fit model_config.{self.config_key}: {error}"
            ) from error
        missing = [key for key in result.missing_keys if key.startswith(PRETRAINED_PARTS)]
        self.pretrained_report = {
            "path": path,
            "loaded": sorted(wanted),
            "missing": missing,
            "unexpected": list(result.unexpected_keys),
            "not_copied": sorted(set(state) - set(wanted)),
        }
        if missing or result.unexpected_keys:
            raise UserConfigError(
                f"{path}: missing {missing} / unexpected {list(result.unexpected_keys)} "
                "keys in the embeddings, encoder or pooler (different bert_layers or sizes?)"
            )
        message = (
            f"{self.config_key}: loaded {len(wanted)} pre-trained tensors "
            f"({', '.join(part.rstrip('.') for part in PRETRAINED_PARTS)}) from {path}; "
            f"{dropped_heads_message(self.pretrained_report['not_copied'], self.heads)}"
        )
        write_run_log(message)

    def _build_head(self, name: str, bert: BertForPreTraining) -> nn.Module:
        hidden = bert.config.hidden_size
        eps = bert.config.layer_norm_eps
        dropout = bert.config.hidden_dropout_prob
        if name == "mlm":
            return MaskedTokenHead(bert.cls.predictions)
        if name == "pmrtc":
            return PhraseTokenHead(bert.cls.predictions)
        if name == "mrc":
            return RegionClassHead(hidden, int(self._required("num_region_classes")), eps)
        if name == "mrfr":
            return FeatureRegressionHead(hidden, self.feature_dim, eps)
        if name == "itm":
            return MatchingHead(hidden)
        if name == "pooled_classifier":
            return PooledClassifierHead(hidden, self._num_labels(), dropout, eps)
        if name == "pair_classifier":
            return PairClassifierHead(hidden, self._num_labels(), dropout, eps)
        return RegionScorerHead(hidden, dropout, eps)

    # ---------------------------------------------------------------- inputs
    def _inputs(self, sample_list: Mapping[str, Any]) -> ModelInputs:
        """Text and visual tensors of the batch; an img0/img1 batch becomes 2B pairs."""
        input_ids = sample_list.get("input_ids")
        if input_ids is None:
            raise ValueError(f"{self.config_key}: the batch has no 'input_ids' (B, L)")
        input_mask = sample_list.get("input_mask")
        if input_mask is None:
            input_mask = (input_ids != 0).long()
        segment_ids = sample_list.get("segment_ids")
        if segment_ids is None:
            segment_ids = torch.zeros_like(input_ids)
        text_boxes = sample_list.get("text_boxes")
        text_is_tag = sample_list.get("text_is_tag")
        if (text_boxes is None) != (text_is_tag is None):
            raise ValueError(
                f"{self.config_key}: 'text_boxes' (B, L, 5) and 'text_is_tag' (B, L) come together"
            )

        if sample_list.get("img0") is None or sample_list.get("img1") is None:
            features, boxes, region_mask = self._visual_inputs(sample_list, "", input_ids)
            return ModelInputs(
                input_ids,
                input_mask,
                segment_ids,
                text_boxes,
                text_is_tag,
                features,
                boxes,
                region_mask,
            )
        # Pairs (NLVR2): [sentence with img0; sentence with img1] -> 2B sequences.
        first = self._visual_inputs(sample_list["img0"], "img0.", input_ids)
        second = self._visual_inputs(sample_list["img1"], "img1.", input_ids)
        features, boxes, region_mask = (torch.cat([a, b]) for a, b in zip(first, second))
        return ModelInputs(
            _twice(input_ids),
            _twice(input_mask),
            _twice(segment_ids),
            _twice(text_boxes),
            _twice(text_is_tag),
            features,
            boxes,
            region_mask,
        )

    def _visual_inputs(
        self, source: Mapping[str, Any], prefix: str, input_ids: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(features (B, R, D), boxes (B, R, 5), mask (B, R)) from our fields or MMF's."""
        features = source.get("region_features")
        if features is not None:
            boxes = source.get("region_boxes")
            if boxes is None:
                raise ValueError(
                    f"{self.config_key}: the batch has '{prefix}region_features' "
                    f"but no '{prefix}region_boxes' (B, R, 5)"
                )
            mask = source.get("region_mask")
            if mask is None:
                mask = torch.ones(features.shape[:2], dtype=torch.long, device=features.device)
        elif source.get("image_feature_0") is not None:
            features = source["image_feature_0"]
            boxes, mask = source.get("region_boxes"), source.get("region_mask")
            if boxes is None or mask is None:  # RefCOCO+'s dataset brings both
                boxes, mask = self._boxes_from_image_info(
                    source.get("image_info_0"), features, prefix
                )
        elif self.text_only_batches:
            batch = input_ids.size(0)
            features = input_ids.new_zeros((batch, 0, self.feature_dim), dtype=torch.float)
            boxes = input_ids.new_zeros((batch, 0, BOX_DIM), dtype=torch.float)
            mask = input_ids.new_zeros((batch, 0))
        else:
            raise ValueError(
                f"{self.config_key}: the batch has no region features: expected "
                f"'{prefix}region_features' "
                f"(B, R, D) or MMF's '{prefix}image_feature_0' (text-only pre-training batches "
                f"need model_config.{self.config_key}.text_only_batches: true)"
            )
        if features.size(-1) != self.feature_dim:
            raise UserConfigError(
                f"{self.config_key}: region features have dimension {features.size(-1)}, "
                f"model_config.{self.config_key}.feature_dim is {self.feature_dim}: set "
                f"model_config.{self.config_key}.feature_dim={features.size(-1)}"
            )
        if boxes.shape != (*features.shape[:2], BOX_DIM):
            raise ValueError(
                f"{self.config_key}: '{prefix}region_boxes' must be (B, R, 5), got "
                f"{tuple(boxes.shape)}"
            )
        return features.float(), boxes.float(), mask

    def _boxes_from_image_info(
        self, info: Optional[Mapping[str, Any]], features: torch.Tensor, prefix: str
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """5-d boxes and the region mask from MMF's ``image_info_0`` (bbox in pixels)."""
        batch, regions = features.shape[:2]
        device = features.device
        if info is None or info.get("bbox") is None or info.get("image_width") is None:
            raise ValueError(
                f"{self.config_key}: '{prefix}image_info_0' needs 'bbox', 'image_width' and "
                "'image_height' "
                "(the feature files' info; set return_features_info: true in the dataset config)"
            )
        boxes = batch_normalized_boxes(
            info["bbox"], info["image_width"], info["image_height"], regions
        )  # on the host, then one copy
        if boxes.size(0) != batch:
            raise ValueError(
                f"{self.config_key}: '{prefix}image_info_0' has the boxes of "
                f"{boxes.size(0)} images, the batch {batch}"
            )
        boxes = boxes.to(device, non_blocking=True)
        counts = info.get("max_features")
        if counts is None:
            mask = torch.ones(batch, regions, dtype=torch.long, device=device)
        else:
            counts = torch.as_tensor(counts, device=device).view(-1, 1).clamp(max=regions)
            mask = (torch.arange(regions, device=device).unsqueeze(0) < counts).long()
        return boxes, mask

    # ---------------------------------------------------------------- encode
    def encode(
        self, sample_list: Mapping[str, Any], output_attentions: Optional[bool] = None
    ) -> Encoded:
        """Run the transformer over [text; regions] and split its output back."""
        if output_attentions is None:
            output_attentions = self.output_attentions
        inputs = self._inputs(sample_list)
        text = self.embeddings.embed_text(
            inputs.input_ids, inputs.segment_ids, inputs.text_boxes, inputs.text_is_tag
        )  # (B, L, H)
        regions = self.embeddings.embed_regions(
            inputs.region_features, inputs.region_boxes
        )  # (B, R, H)
        hidden = torch.cat([text, regions], dim=1)  # (B, L+R, H)
        mask = torch.cat([inputs.input_mask, inputs.region_mask], dim=1)  # (B, L+R)
        mask = mask.to(hidden.dtype)
        additive = (1.0 - mask[:, None, None, :]) * torch.finfo(hidden.dtype).min  # (B, 1, 1, L+R)
        out = self.encoder(
            hidden, attention_mask=additive, output_attentions=output_attentions, return_dict=True
        )
        sequence = out.last_hidden_state  # (B, L+R, H)
        length = text.size(1)
        return Encoded(
            text=sequence[:, :length],
            regions=sequence[:, length:],
            pooled=pool(self.pooler, sequence, mask, self.pooling),  # (B, H)
            region_mask=inputs.region_mask,
            attentions=out.attentions if output_attentions else None,
        )

    @staticmethod
    def _any_weighted(sample_list: Mapping[str, Any], weighted: torch.Tensor) -> bool:
        """Whether a sample is curriculum-weighted: from the host flags of a collated
        batch (no wait for the device), else from the tensor."""
        host = sample_list.get("curriculum_weighted_host")
        if host is not None:
            return any(host)
        return bool(weighted.any())

    @torch.no_grad()
    def _clean_match_logits(self, sample_list: Mapping[str, Any]) -> torch.Tensor:
        """ITM logits (B, 2) of the batch's uncorrupted pairs (the curriculum weight)."""
        missing = [
            k for k in ("clean_input_ids", "clean_region_features") if sample_list.get(k) is None
        ]
        if missing:
            raise ValueError(
                f"{self.config_key}: a curriculum-weighted batch needs {missing} "
                "(the unmasked pair, emitted by the R-N and I-S processors)"
            )
        clean = dict(sample_list.items())
        clean["input_ids"] = sample_list["clean_input_ids"]
        clean["region_features"] = sample_list["clean_region_features"]
        training = self.training
        self.eval()  # the pair's score without dropout noise (and no draw from the RNG)
        try:
            return self.heads["itm"](self.encode(clean, False), clean)["itm_logits"]
        finally:
            self.train(training)

    def forward(
        self, sample_list: Mapping[str, Any], output_attentions: Optional[bool] = None
    ) -> Dict[str, Any]:
        if self._cuda_graphs:
            mark_cuda_graph_step()
        encoded = self.encode(sample_list, output_attentions)
        output: Dict[str, Any] = {}
        idle = []
        for name, head in self.heads.items():
            result = head(encoded, sample_list)
            if result is not None:
                output.update(result)
            if result is None or _without_targets(name, result, sample_list):
                idle.append(name)
        if self.training and idle:
            self._explain_idle_heads(sample_list, idle)
        weighted = sample_list.get("curriculum_weighted")
        # An evaluation-only run (no train split loaded, so no sizes) reports unweighted losses.
        schedulable = self.training or bool(registered_train_samples())
        if self.curriculum is not None and weighted is not None and schedulable:
            logits = output["itm_logits"]
            active = self.curriculum.active()  # asked once a step
            if active and self._any_weighted(sample_list, weighted):
                logits = self._clean_match_logits(sample_list)
            output["curriculum_weights"] = self.curriculum.weights(logits, weighted, active)
            if self.training:
                self._log_curriculum(output["curriculum_weights"], weighted, active)
        if encoded.attentions is not None:
            output["attentions"] = encoded.attentions
        return output
