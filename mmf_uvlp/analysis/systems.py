"""The models the analysis looks inside: ``uvla`` (BERT init or pre-trained), MMF ``visual_bert``.

A *spec* says what to load:

- ``base``: ``uvla`` built from the model config with no pre-trained weights (the BERT
  init, "Base"; new modules such as the visual projection are seeded);
- a state-dict file (``uvla_final.pth``): ``uvla`` from the model config with that
  file's embeddings, encoder and pooler (``model_config.uvla.pretrained_checkpoint``);
- an MMF checkpoint from ``mmf_run`` (``*.ckpt``): its own config names the model
  (``uvla`` or ``visual_bert``) and its settings; its weights are loaded.

Files load with ``torch.load(weights_only=True)``: tensors and plain data, nothing that
runs; ``--trust-checkpoint`` opts in to a legacy file holding other objects.

The model config is ``model_config.uvla`` of the plugin's defaults, merged with the
``--config`` yaml and ``key=value`` overrides; ``feature_dim`` always follows the data.
A :class:`System` runs in eval mode and returns, for a :class:`Batch` over
``[text; regions]`` (text first, so region ``r`` is position ``L + r``), the attention
maps of every layer and the last layer's hidden states.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from mmf_uvlp.analysis.regions import ImageRegions
from mmf_uvlp.utils.boxes import normalized_boxes
from mmf_uvlp.utils.safe_loading import load_checkpoint

TRUST_HINT = "pass --trust-checkpoint (it may then run code)"

BASE = "base"


@dataclass
class Batch:
    """Padded model inputs: B sequences of L text positions and R regions."""

    input_ids: torch.Tensor  # (B, L)
    input_mask: torch.Tensor  # (B, L)
    region_features: torch.Tensor  # (B, R, D)
    region_boxes: torch.Tensor  # (B, R, 5)
    region_mask: torch.Tensor  # (B, R)
    text_boxes: torch.Tensor | None = None  # (B, L, 5), tag inputs only
    text_is_tag: torch.Tensor | None = None  # (B, L)

    @property
    def text_length(self) -> int:
        return int(self.input_ids.size(1))

    def fields(self) -> dict[str, Any]:
        """The batch fields of the ``uvla`` model."""
        fields = {
            "input_ids": self.input_ids,
            "input_mask": self.input_mask,
            "segment_ids": torch.zeros_like(self.input_ids),
            "region_features": self.region_features,
            "region_boxes": self.region_boxes,
            "region_mask": self.region_mask,
        }
        if self.text_boxes is not None:
            fields.update(text_boxes=self.text_boxes, text_is_tag=self.text_is_tag)
        return fields


def make_batch(
    token_ids: Sequence[Sequence[int]],
    regions: Sequence[ImageRegions],
    owners: Sequence[Sequence[int]] | None = None,
) -> Batch:
    """Pad token ids and regions; ``owners`` (region of each tag position, -1 else) adds tags."""
    batch, length = len(token_ids), max(len(t) for t in token_ids)
    count = max(max(len(r) for r in regions), 1)
    dim = regions[0].features.shape[1]
    ids = torch.zeros(batch, length, dtype=torch.long)
    mask = torch.zeros(batch, length, dtype=torch.long)
    features = torch.zeros(batch, count, dim)
    boxes = torch.zeros(batch, count, 5)
    region_mask = torch.zeros(batch, count, dtype=torch.long)
    for i, (tokens, image) in enumerate(zip(token_ids, regions)):
        ids[i, : len(tokens)] = torch.tensor(tokens)
        mask[i, : len(tokens)] = 1
        n = len(image)
        features[i, :n] = torch.from_numpy(image.features)
        boxes[i, :n] = normalized_boxes(torch.from_numpy(image.boxes), image.width, image.height)
        region_mask[i, :n] = 1
    result = Batch(ids, mask, features, boxes, region_mask)
    if owners is not None:
        owner = torch.full((batch, length), -1, dtype=torch.long)
        for i, row in enumerate(owners):
            owner[i, : len(row)] = torch.tensor(row)
        is_tag = owner >= 0
        text_boxes = torch.zeros(batch, length, 5)
        rows = torch.arange(batch).unsqueeze(1).expand(batch, length)
        text_boxes[is_tag] = boxes[rows[is_tag], owner[is_tag]]
        result.text_boxes, result.text_is_tag = text_boxes, is_tag.long()
    return result


@dataclass
class Outputs:
    """What a system returns for a batch of T = L + R positions."""

    attentions: tuple[torch.Tensor, ...] | None  # per layer (B, heads, T, T)
    hidden: torch.Tensor  # (B, T, hidden) of the last layer


class System:
    """A named model in eval mode; subclasses adapt the model's own forward."""

    supports_tags = False

    def __init__(self, name: str, spec: str, model: torch.nn.Module, layers: int, heads: int):
        self.name, self.spec, self.model = name, spec, model.eval()
        self.layers, self.heads = layers, heads

    def __call__(self, batch: Batch, attentions: bool = True) -> Outputs:
        raise NotImplementedError


class UVLASystem(System):
    """``uvla`` through its ``encode`` (attention maps on request)."""

    supports_tags = True

    def __call__(self, batch: Batch, attentions: bool = True) -> Outputs:
        with torch.no_grad():
            encoded = self.model.encode(batch.fields(), output_attentions=attentions)
        hidden = torch.cat([encoded.text, encoded.regions], dim=1)
        return Outputs(tuple(encoded.attentions) if attentions else None, hidden)


class VisualBERTSystem(System):
    """MMF's ``visual_bert``, built with ``output_attentions`` / ``output_hidden_states``."""

    def __call__(self, batch: Batch, attentions: bool = True) -> Outputs:
        from mmf.common.sample import Sample, SampleList

        pairs = self.model.config.training_head_type == "nlvr2"
        samples = []
        for i in range(batch.input_ids.size(0)):
            sample = Sample()
            sample.input_ids = batch.input_ids[i]
            sample.input_mask = batch.input_mask[i]
            sample.segment_ids = torch.zeros_like(batch.input_ids[i])
            image = Sample()
            image.image_feature_0 = batch.region_features[i]
            image.image_info_0 = {"max_features": batch.region_mask[i].sum()}
            if pairs:  # the same image on both sides; the first half is kept
                sample.img0, sample.img1 = image, image
            else:
                sample.update(image)
            samples.append(sample)
        sample_list = SampleList(samples)
        sample_list.dataset_name, sample_list.dataset_type = "flickr30k_entities", "test"
        with torch.no_grad():
            output = self.model.forward(sample_list)
        size = batch.input_ids.size(0)
        maps = tuple(a[:size] for a in output["attention_weights"][-1]) if attentions else None
        return Outputs(maps, output["sequence_output"][:size])


# ------------------------------------------------------------------------- loading
def uvla_config(config_path: str | os.PathLike | None, opts: Sequence[str] = ()) -> DictConfig:
    """``model_config.uvla``: plugin defaults <- ``config_path`` yaml <- ``opts`` (full keys)."""
    from mmf.utils.configuration import load_yaml

    from mmf_uvlp.models.uvla import UVLA

    merged = load_yaml(UVLA.config_path())
    if config_path is not None:
        merged = OmegaConf.merge(merged, load_yaml(str(config_path)))
    merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(opts)))
    return merged.model_config.uvla


def _analysis_uvla(config: DictConfig, feature_dim: int, pretrained: str | None) -> DictConfig:
    config = OmegaConf.merge(
        config,
        {
            "feature_dim": feature_dim,
            "pretrained_checkpoint": pretrained,
            "heads": [],
            "losses": [],
            "curriculum": {"enabled": False},
            "output_attentions": False,
        },
    )
    return config


def _uvla(name: str, spec: str, config: DictConfig, seed: int) -> UVLASystem:
    from mmf_uvlp.models.uvla import UVLA

    torch.manual_seed(seed)
    model = UVLA(config)
    model.build()
    return UVLASystem(
        name,
        spec,
        model,
        model.bert_config.num_hidden_layers,
        model.bert_config.num_attention_heads,
    )


def _visual_bert(name: str, spec: str, checkpoint: dict, feature_dim: int) -> VisualBERTSystem:
    from mmf.models.visual_bert import VisualBERT

    config = OmegaConf.create(checkpoint["config"]["model_config"]["visual_bert"])
    if int(config.visual_embedding_dim) != feature_dim:
        raise ValueError(
            f"{spec}: model_config.visual_bert.visual_embedding_dim is "
            f"{config.visual_embedding_dim}, the region features have {feature_dim}"
        )
    # Weights come from the checkpoint: build from its sizes, without the BERT folder.
    config = OmegaConf.merge(
        config, {"bert_model_name": None, "output_attentions": True, "output_hidden_states": True}
    )
    model = VisualBERT(config)
    model.build()
    state = {k.removeprefix("module."): v for k, v in checkpoint["model"].items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{spec}: weights do not fit model_config.visual_bert: {error}") from None
    bert = model.model.bert.config
    return VisualBERTSystem(name, spec, model, bert.num_hidden_layers, bert.num_attention_heads)


def load_system(
    name: str, spec: str, config: DictConfig, feature_dim: int, seed: int = 0, trust: bool = False
) -> System:
    """The system ``name`` from ``spec`` (``base``, a ``.pth`` state dict or an MMF ``.ckpt``).

    Checkpoints load with ``weights_only``; ``trust`` (``--trust-checkpoint``) also loads a
    legacy file holding other objects, which can run code.
    """
    if spec == BASE:
        return _uvla(name, spec, _analysis_uvla(config, feature_dim, None), seed)
    if not os.path.isfile(spec):
        raise FileNotFoundError(
            f"model {name}={spec}: no such checkpoint (expected '{BASE}', "
            "a uvla state dict or an MMF .ckpt)"
        )
    checkpoint = load_checkpoint(spec, trust, trust_hint=TRUST_HINT)
    config = OmegaConf.merge(config, {"trust_checkpoint": trust})
    mmf_config = checkpoint.get("config") if isinstance(checkpoint, dict) else None
    if mmf_config is None:
        return _uvla(name, spec, _analysis_uvla(config, feature_dim, spec), seed)
    model = mmf_config.get("model")
    if model == "visual_bert":
        return _visual_bert(name, spec, checkpoint, feature_dim)
    if model == "uvla":
        own = OmegaConf.merge(config, mmf_config["model_config"]["uvla"])
        return _uvla(name, spec, _analysis_uvla(own, feature_dim, spec), seed)
    raise ValueError(
        f"{spec}: an MMF checkpoint of model {model!r}; the analysis reads 'uvla' and 'visual_bert'"
    )


def parse_named(values: Sequence[str], flag: str, expected: str) -> list[tuple[str, str]]:
    """``NAME=VALUE`` pairs of a repeatable ``flag`` (a bare ``VALUE`` is named after its
    file); ``expected`` says what a malformed one should look like."""
    pairs = []
    for value in values:
        name, sep, spec = value.partition("=")
        if not sep:
            name, spec = Path(value).name or value, value  # "runs/a/" is named "a"
        if not name or not spec:
            raise ValueError(f"{flag} {value!r}: expected {expected}")
        pairs.append((name, spec))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"{flag}: names must be unique, got {names}")
    return pairs


def parse_model_args(values: Sequence[str]) -> list[tuple[str, str]]:
    """``--model NAME=SPEC`` pairs (a bare ``SPEC`` is named after its file)."""
    return parse_named(
        values, "--model", f"NAME=SPEC (SPEC: '{BASE}', a uvla state dict or an MMF .ckpt)"
    )
