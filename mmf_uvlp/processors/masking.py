"""Masking primitives and the shared base of the μ-VLA masking processors.

The three processors (``uvla_region_tag_masking``, ``uvla_region_phrase_masking``,
``uvla_image_sentence_masking``) turn one raw sample into the fixed-size tensors of the
μ-VLA batch contract (padded, so MMF's default collation stacks them):

text part (L = ``max_seq_length``):
  ``input_ids``, ``input_mask``, ``segment_ids`` (L,) long; ``lm_label_ids`` (L,) target
  id at masked positions, -1 elsewhere; ``text_boxes`` (L, 5) float (the region box of a
  tag token, 0 elsewhere); ``text_is_tag`` (L,) long.
visual part (R = ``max_regions``, D feature dim, P = ``max_phrase_tokens``):
  ``region_features`` (R, D) float after masking; ``region_boxes`` (R, 5) float
  ``[x1/W, y1/H, x2/W, y2/H, area/(W*H)]``; ``region_mask`` (R,) long 1 = real;
  ``region_masked`` (R,) long; ``region_class_targets`` (R,) long, -1 = ignore;
  ``region_phrase_targets`` (R, P) long, -1 padding; with region masking (MRM: R-T and the
  baselines' processors) ``region_features_target`` (R, D) float, the ORIGINAL features
  (MRFR target).
sample: ``itm_label`` () long (1 match, 0 negative, -1 n.a.); ``curriculum_weighted`` ()
  bool; ``targets`` () long = ``itm_label`` (MMF computes losses only for batches that
  have a ``targets`` field).
curriculum-weighted processors (R-N, I-S) also emit the uncorrupted pair, from which the
  model reads the curriculum weight w_ITM (the paper's match score of the *pair*, not of its
  masked copy): ``clean_input_ids`` (L,) long and ``clean_region_features`` (R, D) float.

Called with ``padded=False`` (the plugin's datasets, which pad each batch to its longest,
:mod:`mmf_uvlp.datasets.collate`), the three feature fields hold the real rows only
(N, D); every other field and every random draw is the same as with ``padded=True``.

Common raw input keys (one image): ``features`` (N, D) float array / tensor,
``boxes`` (N, 4) pixel ``[x1, y1, x2, y2]``, ``image_width``, ``image_height``. The
first ``max_regions`` regions are kept.

Randomness: a ``torch.Generator`` passed to ``__call__`` (the plugin's datasets pass one
seeded per sample from the run's sampler, so every worker count draws the same masks;
tests); else, inside a
DataLoader worker, torch's global RNG, which PyTorch reseeds for every worker and epoch
from the main process's RNG (seeded by MMF from ``training.seed``), so workers and epochs
never repeat each other's masks; else (no workers) the processor's own generator seeded
once with ``seed`` when set, or torch's global RNG.

BERT-style token corruption (MLM): each selected token becomes ``[MASK]`` with
probability ``mask_token_prob`` (0.8), a random non-special word-piece with
``random_token_prob`` (0.1), and stays as is otherwise. Region corruption: a selected
region's features are zeroed with probability ``zero_prob`` (0.9), else kept.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from transformers import BertTokenizerFast

from mmf.datasets.processors.processors import BaseProcessor
from mmf_uvlp.modules.boxes import normalized_boxes
from mmf_uvlp.utils.bert_source import load_or_explain

IGNORE = -1
RawItem = Mapping[str, Any]  # one raw sample, as the dataset hands it over
Sample = Dict[str, torch.Tensor]  # the batch-contract fields of one sample


def select_bernoulli(candidates: torch.Tensor, prob: torch.Tensor | float,
                     generator: Optional[torch.Generator]) -> torch.Tensor:
    """Each candidate (bool (N,)) selected independently with ``prob`` (scalar or (N,))."""
    draws = torch.rand(candidates.shape, generator=generator)
    return candidates & (draws < prob)


def corrupt_tokens(input_ids: torch.Tensor, selected: torch.Tensor, mask_id: int,
                   random_ids: torch.Tensor, generator: Optional[torch.Generator],
                   mask_token_prob: float,
                   random_token_prob: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 on the ``selected`` (L,) positions; returns (input_ids, lm_label_ids)."""
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    draws = torch.rand(input_ids.shape, generator=generator)
    to_mask = selected & (draws < mask_token_prob)
    random_end = mask_token_prob + random_token_prob
    to_random = selected & (draws >= mask_token_prob) & (draws < random_end)
    picks = random_ids[torch.randint(len(random_ids), input_ids.shape, generator=generator)]
    corrupted = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    corrupted = torch.where(to_random, picks, corrupted)
    return corrupted, labels


def restore_targets(input_ids: torch.Tensor, lm_label_ids: torch.Tensor) -> torch.Tensor:
    """``input_ids`` (L,) with each MLM target put back: the uncorrupted text."""
    return torch.where(lm_label_ids != IGNORE, lm_label_ids, input_ids)


def corrupt_regions(features: torch.Tensor, selected: torch.Tensor, zero_prob: float,
                    generator: Optional[torch.Generator]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Zero the features (N <= R, D) of each selected region (R,) with probability
    ``zero_prob``; returns (features, zeroed (R,) bool). The draws have the shape of
    ``selected`` whatever N is."""
    zeroed = selected & (torch.rand(selected.shape, generator=generator) < zero_prob)
    return features.masked_fill(zeroed[: features.size(0)].unsqueeze(-1), 0.0), zeroed


def probability_param(name: str, value: float) -> float:
    """A processor param that must be a probability."""
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"processor param {name} must be in [0, 1], got {value}")
    return value


class UVLAMaskingProcessor(BaseProcessor):
    """Shared params and packing of the μ-VLA masking processors.

    Params: ``tokenizer_path`` (a local BERT tokenizer folder), ``max_seq_length`` (60),
    ``max_regions`` (100), ``max_phrase_tokens`` (8), ``mask_prob`` (0.15),
    ``mask_token_prob`` (0.8), ``random_token_prob`` (0.1), ``zero_prob`` (0.9),
    ``seed`` (null), ``curriculum_weighted`` (per processor).
    """

    default_curriculum_weighted = False

    # BaseProcessor.__init__ is a no-op whose signature differs between MMF rc10 and main,
    # so it is not called.
    def __init__(self, config: Mapping[str, Any], *args: Any, **kwargs: Any):
        config = config or {}
        path = config.get("tokenizer_path", None)
        if path is None:
            raise ValueError(f"processor {type(self).__name__}: params.tokenizer_path (a local "
                             "BERT tokenizer folder) must be set")
        self.tokenizer = load_or_explain(BertTokenizerFast.from_pretrained, str(path),
                                         "processor params.tokenizer_path", ("vocabulary",))
        self.max_seq_length = int(config.get("max_seq_length", 60))
        self.max_regions = int(config.get("max_regions", 100))
        self.max_phrase_tokens = int(config.get("max_phrase_tokens", 8))
        if self.max_seq_length < 3 or self.max_regions < 1 or self.max_phrase_tokens < 1:
            raise ValueError("processor params: max_seq_length >= 3, max_regions >= 1 and "
                             "max_phrase_tokens >= 1 are required")
        self.mask_prob = probability_param("mask_prob", config.get("mask_prob", 0.15))
        self.mask_token_prob = probability_param(
            "mask_token_prob", config.get("mask_token_prob", 0.8))
        self.random_token_prob = probability_param(
            "random_token_prob", config.get("random_token_prob", 0.1))
        if self.mask_token_prob + self.random_token_prob > 1:
            raise ValueError("processor params: mask_token_prob + random_token_prob must be <= 1")
        self.zero_prob = probability_param("zero_prob", config.get("zero_prob", 0.9))
        self.curriculum_weighted = bool(
            config.get("curriculum_weighted", self.default_curriculum_weighted))
        seed = config.get("seed", None)
        self._generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        special = set(self.tokenizer.all_special_ids)
        self.random_ids = torch.tensor([i for i in range(len(self.tokenizer)) if i not in special])

    # ------------------------------------------------------------ randomness
    def generator(self, override: Optional[torch.Generator] = None) -> Optional[torch.Generator]:
        """The generator to draw from (see the module docstring)."""
        if override is not None:
            return override
        if torch.utils.data.get_worker_info() is not None:
            return None
        return self._generator

    # ------------------------------------------------------------ one or a batch
    def __call__(self, item: RawItem, generator: Optional[torch.Generator] = None,
                 padded: bool = True) -> Sample:
        """The sample of one raw item, its draws from ``generator`` (see the module
        docstring); with ``padded=False`` its feature rows unpadded."""
        return self.sample(item, self.encode([item])[0], self.generator(generator), padded)

    def batch(self, items: Sequence[RawItem], generators: Sequence[Optional[torch.Generator]],
              padded: bool = False) -> List[Sample]:
        """The samples of ``items``, item i's draws from ``generators[i]``: what ``__call__``
        gives for each, with the text of all items tokenized in one tokenizer call."""
        if len(generators) != len(items):
            raise ValueError(f"processor {type(self).__name__}: {len(items)} items but "
                             f"{len(generators)} generators")
        encodings = self.encode(items)
        return [self.sample(item, encoding, self.generator(generator), padded)
                for item, encoding, generator in zip(items, encodings, generators)]

    def encode(self, items: Sequence[RawItem]) -> List[Any]:
        """The tokenizer's output for each item, from one tokenizer call (no random draw)."""
        raise NotImplementedError

    def sample(self, item: RawItem, encoding: Any, generator: Optional[torch.Generator],
               padded: bool) -> Sample:
        """The sample of ``item`` from its ``encode`` output, its draws from ``generator``."""
        raise NotImplementedError

    # --------------------------------------------------------------- packing
    def corrupt(self, input_ids: torch.Tensor, selected: torch.Tensor,
                generator: Optional[torch.Generator]) -> Tuple[torch.Tensor, torch.Tensor]:
        """80/10/10 corruption of ``selected`` tokens; returns (input_ids, lm_label_ids)."""
        return corrupt_tokens(input_ids, selected, self.tokenizer.mask_token_id, self.random_ids,
                              generator, self.mask_token_prob, self.random_token_prob)

    def pack_regions(self, item: RawItem, padded: bool = True) -> Dict[str, torch.Tensor]:
        """The first ``max_regions`` regions: 5-d boxes and mask padded to ``max_regions``,
        features too when ``padded`` (else the n real rows, a view), and the count n."""
        for key in ("features", "boxes", "image_width", "image_height"):
            if item.get(key) is None:
                raise ValueError(f"processor {type(self).__name__}: raw input needs '{key}'")
        features = torch.as_tensor(item["features"], dtype=torch.float32)
        boxes = torch.as_tensor(item["boxes"], dtype=torch.float32)
        if features.dim() != 2 or boxes.shape != (features.size(0), 4):
            raise ValueError(
                f"processor {type(self).__name__}: 'features' must be (N, D) and 'boxes' (N, 4), "
                f"got {tuple(features.shape)} and {tuple(boxes.shape)}"
            )
        n = min(features.size(0), self.max_regions)
        if padded:
            rows = torch.zeros(self.max_regions, features.size(1))
            rows[:n] = features[:n]
        else:
            rows = features[:n]
        box5 = torch.zeros(self.max_regions, 5)
        width, height = float(item["image_width"]), float(item["image_height"])
        box5[:n] = normalized_boxes(boxes[:n], width, height)
        mask = torch.zeros(self.max_regions, dtype=torch.long)
        mask[:n] = 1
        return {"region_features": rows, "region_boxes": box5, "region_mask": mask,
                "num_regions": torch.tensor(n), "clean_region_features": rows,
                "region_zeroed": torch.zeros(self.max_regions, dtype=torch.bool)}

    def encode_sentences(self, items: Sequence[RawItem], needs: str,
                         **options: Any) -> List[Dict[str, list]]:
        """Every item's ``sentence`` tokenized (one tokenizer call for all), truncated to
        ``max_seq_length``; ``needs``: the error when an item has no sentence."""
        sentences = [item.get("sentence") for item in items]
        if not all(isinstance(sentence, str) for sentence in sentences):
            raise ValueError(needs)
        if not sentences:
            return []
        encoding = self.tokenizer(sentences, truncation=True, max_length=self.max_seq_length,
                                  **options)
        keys = list(encoding.keys())
        return [{key: encoding[key][i] for key in keys} for i in range(len(sentences))]

    def mask_sentence(
        self, encoding: Mapping[str, list], prob: float, generator: Optional[torch.Generator]
    ) -> Tuple[torch.Tensor, torch.Tensor, int]:
        """Standard MLM on one encoded sentence (``encode_sentences`` with
        ``return_special_tokens_mask``): each word-piece (not [CLS], [SEP] or padding) is
        selected with ``prob`` and corrupted 80/10/10; returns (input_ids, lm_label_ids, length)."""
        ids = encoding["input_ids"]
        candidates = torch.zeros(self.max_seq_length, dtype=torch.bool)
        candidates[: len(ids)] = torch.tensor(encoding["special_tokens_mask"]) == 0
        input_ids, lm_label_ids = self.corrupt(
            self.pad_text(ids), select_bernoulli(candidates, prob, generator), generator)
        return input_ids, lm_label_ids, len(ids)

    def region_classes(self, item: RawItem, num_regions: int) -> torch.Tensor:
        """The detector class ids (MRC targets) of the first ``num_regions`` regions."""
        classes = item.get("region_classes")
        if classes is None:
            raise ValueError(f"processor {type(self).__name__}: raw input needs 'region_classes' "
                             "(N,) detector class ids")
        classes = torch.as_tensor(classes, dtype=torch.long).view(-1)
        if classes.numel() < num_regions:
            raise ValueError(f"processor {type(self).__name__}: 'region_classes' needs one entry "
                             f"per region of 'features' ({num_regions}), got {classes.numel()}")
        return classes[:num_regions]

    def mask_regions(self, regions: Dict[str, torch.Tensor], classes: torch.Tensor,
                     selected: torch.Tensor,
                     generator: Optional[torch.Generator]) -> Dict[str, torch.Tensor]:
        """MRM on the ``selected`` real regions (R,) of ``pack_regions``' output: replaces
        ``regions["region_features"]`` by the corrupted features and returns the targets
        (``assemble`` keyword arguments): ``region_masked``, ``region_class_targets`` (their
        detector class, MRC) and ``region_features_target`` (the original features, MRFR)."""
        n = int(regions["num_regions"])
        if bool(selected[n:].any()):
            raise ValueError("mask_regions: only real regions can be selected")
        original = regions["region_features"]
        regions["region_features"], regions["region_zeroed"] = corrupt_regions(
            original, selected, self.zero_prob, generator)
        class_targets = torch.full((self.max_regions,), IGNORE, dtype=torch.long)
        class_targets[:n][selected[:n]] = classes[:n][selected[:n]]
        return {"region_masked": selected.long(), "region_class_targets": class_targets,
                "region_features_target": original}

    def pad_text(self, ids: list) -> torch.Tensor:
        """Word-piece ids padded with [PAD] to ``max_seq_length``."""
        padded = torch.full((self.max_seq_length,), self.tokenizer.pad_token_id, dtype=torch.long)
        padded[: len(ids)] = torch.tensor(ids, dtype=torch.long)
        return padded

    def assemble(self, input_ids: torch.Tensor, lm_label_ids: torch.Tensor, length: int,
                 regions: Dict[str, torch.Tensor], itm_label: int = IGNORE,
                 text_boxes: Optional[torch.Tensor] = None,
                 text_is_tag: Optional[torch.Tensor] = None,
                 region_masked: Optional[torch.Tensor] = None,
                 region_class_targets: Optional[torch.Tensor] = None,
                 region_phrase_targets: Optional[torch.Tensor] = None,
                 region_features_target: Optional[torch.Tensor] = None,
                 clean_input_ids: Optional[torch.Tensor] = None) -> Sample:
        """The batch-contract dict of one sample (defaults: nothing masked / no tags; the
        MRFR target only when given; the clean pair when ``curriculum_weighted``, its text
        ``clean_input_ids`` or else ``input_ids`` with every MLM target restored)."""
        L, R, P = self.max_seq_length, self.max_regions, self.max_phrase_tokens
        input_mask = torch.zeros(L, dtype=torch.long)
        input_mask[:length] = 1
        label = torch.tensor(itm_label, dtype=torch.long)
        sample = {
            "input_ids": input_ids,
            "input_mask": input_mask,
            "segment_ids": torch.zeros(L, dtype=torch.long),
            "lm_label_ids": lm_label_ids,
            "text_boxes": text_boxes if text_boxes is not None else torch.zeros(L, 5),
            "text_is_tag": (text_is_tag if text_is_tag is not None
                            else torch.zeros(L, dtype=torch.long)),
            "region_features": regions["region_features"],
            "region_boxes": regions["region_boxes"],
            "region_mask": regions["region_mask"],
            "region_zeroed": regions["region_zeroed"],
            "region_masked": (region_masked if region_masked is not None
                              else torch.zeros(R, dtype=torch.long)),
            "region_class_targets": (region_class_targets if region_class_targets is not None
                                     else torch.full((R,), IGNORE, dtype=torch.long)),
            "region_phrase_targets": (region_phrase_targets if region_phrase_targets is not None
                                      else torch.full((R, P), IGNORE, dtype=torch.long)),
            "itm_label": label,
            "curriculum_weighted": torch.tensor(self.curriculum_weighted),
            "targets": label.clone(),
        }
        if region_features_target is not None:
            sample["region_features_target"] = region_features_target
        if self.curriculum_weighted:
            if clean_input_ids is None:
                clean_input_ids = restore_targets(input_ids, lm_label_ids)
            sample["clean_input_ids"] = clean_input_ids
            sample["clean_region_features"] = regions["clean_region_features"]
        return sample
