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
first ``max_regions`` regions are kept. With resident features
(:mod:`mmf_uvlp.datasets.resident_features`) ``features`` is (N, 0) and ``feature_rows``
(N,) long gives each region's table row: the batch gets ``region_feature_rows`` (R,) long,
-1 at padding, and every feature field is zero-width until the model's device fills it.

A batch is masked at once (``batch``: one tokenizer call, the masks drawn and applied as
(B, L) and (B, R) tensors); ``__call__`` is a batch of one. Each sample's draws are one row
of uniforms from its own generator, at fixed offsets per processor (``DRAWS``), so a sample
gets the same masks alone or in any batch.

Randomness: a ``torch.Generator`` per sample (the plugin's datasets pass one seeded per
sample from the run's sampler, so every worker count draws the same masks; tests); else,
inside a
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
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.batch import ROWS_FIELD as RESIDENT_ROWS
from mmf_uvlp.utils.boxes import normalized_boxes
from mmf_uvlp.utils.bert_source import load_or_explain

IGNORE = -1
RawItem = Mapping[str, Any]  # one raw sample, as the dataset hands it over
Sample = Dict[str, torch.Tensor]  # the batch-contract fields of one sample
Batch = Dict[str, Any]  # batch fields: (B, ...) tensors, or one (N_i, D) tensor per sample


def uniform_draws(generators: Sequence[Optional[torch.Generator]], size: int) -> torch.Tensor:
    """(B, size) float64 uniforms in [0, 1): row i from ``generators[i]`` (None: torch's
    global generator), so a sample's draws do not depend on the rest of its batch."""
    return torch.stack([torch.rand(size, generator=g, dtype=torch.float64) for g in generators])


def corrupt_tokens(
    input_ids: torch.Tensor,
    selected: torch.Tensor,
    kind: torch.Tensor,
    pick: torch.Tensor,
    mask_id: int,
    random_ids: torch.Tensor,
    mask_token_prob: float,
    random_token_prob: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 on the ``selected`` (B, L) positions, ``kind`` and ``pick`` (B, L)
    uniforms choosing [MASK] / a random word-piece / kept and which random word-piece;
    returns (input_ids, lm_label_ids)."""
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    to_mask = selected & (kind < mask_token_prob)
    to_random = selected & (kind >= mask_token_prob) & (kind < mask_token_prob + random_token_prob)
    count = len(random_ids)
    picks = random_ids[(pick * count).long().clamp(max=count - 1)]
    corrupted = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    return torch.where(to_random, picks, corrupted), labels


def restore_targets(input_ids: torch.Tensor, lm_label_ids: torch.Tensor) -> torch.Tensor:
    """``input_ids`` with each MLM target put back: the uncorrupted text."""
    return torch.where(lm_label_ids != IGNORE, lm_label_ids, input_ids)


def probability_param(processor: str, name: str, value: Any) -> float:
    """A param of ``processor`` (its class name) that must be a probability."""
    try:
        probability = float(value)
    except (TypeError, ValueError):
        probability = float("nan")
    if not 0.0 <= probability <= 1.0:
        raise UserConfigError(
            f"processor {processor}: params.{name} must be a number in [0, 1], got {value!r}"
        )
    return probability


def padded_rows(rows: Sequence[Sequence[int]], size: int, fill: int) -> torch.Tensor:
    """(B, size) long: each list of ints (at most ``size``) padded with ``fill``."""
    return torch.tensor([list(row) + [fill] * (size - len(row)) for row in rows], dtype=torch.long)


def whole_param(processor: str, name: str, value: Any, minimum: int) -> int:
    """A param of ``processor`` (its class name) that must be a whole number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        number = None
    else:
        number = int(value)
    if number is None or number < minimum:
        raise UserConfigError(
            f"processor {processor}: params.{name} must be a whole number >= {minimum}, "
            f"got {value!r}"
        )
    return number


class UVLAMaskingProcessor(BaseProcessor):
    """Shared params, batch packing and corruption of the μ-VLA masking processors.

    Params: ``tokenizer_path`` (a local BERT tokenizer folder), ``max_seq_length`` (60),
    ``max_regions`` (100), ``max_phrase_tokens`` (8), ``mask_prob`` (0.15),
    ``mask_token_prob`` (0.8), ``random_token_prob`` (0.1), ``zero_prob`` (0.9),
    ``seed`` (null), ``curriculum_weighted`` (per processor).

    A subclass names its per-sample draws in ``DRAWS`` (name, size: ``"L"``, ``"R"``,
    ``"1"`` or a sum such as ``"L+R"``) and implements ``mask`` (the batch's fields from its raw
    items, encodings and draws), and ``encode`` (the tokenizer, one call per batch) where its
    input is more than one ``sentence`` per item.
    """

    default_curriculum_weighted = False
    DRAWS: Tuple[Tuple[str, str], ...] = ()

    # BaseProcessor.__init__ is a no-op whose signature differs between MMF rc10 and main,
    # so it is not called.
    def __init__(self, config: Mapping[str, Any], *args: Any, **kwargs: Any):
        config = config or {}
        path = config.get("tokenizer_path", None)
        if path is None:
            raise UserConfigError(
                f"processor {type(self).__name__}: params.tokenizer_path (a local "
                "BERT tokenizer folder) must be set"
            )
        self.tokenizer = load_or_explain(
            BertTokenizerFast.from_pretrained,
            str(path),
            "processor params.tokenizer_path",
            ("vocabulary",),
        )
        name = type(self).__name__
        self.max_seq_length = whole_param(
            name, "max_seq_length", config.get("max_seq_length", 60), 3
        )
        self.max_regions = whole_param(name, "max_regions", config.get("max_regions", 100), 1)
        self.max_phrase_tokens = whole_param(
            name, "max_phrase_tokens", config.get("max_phrase_tokens", 8), 1
        )
        self.mask_prob = probability_param(
            type(self).__name__, "mask_prob", config.get("mask_prob", 0.15)
        )
        self.mask_token_prob = probability_param(
            type(self).__name__, "mask_token_prob", config.get("mask_token_prob", 0.8)
        )
        self.random_token_prob = probability_param(
            type(self).__name__, "random_token_prob", config.get("random_token_prob", 0.1)
        )
        if self.mask_token_prob + self.random_token_prob > 1:
            raise UserConfigError(
                f"processor {name}: params.mask_token_prob + params.random_token_prob must be "
                f"<= 1, got {self.mask_token_prob} + {self.random_token_prob}"
            )
        self.zero_prob = probability_param(
            type(self).__name__, "zero_prob", config.get("zero_prob", 0.9)
        )
        self.curriculum_weighted = bool(
            config.get("curriculum_weighted", self.default_curriculum_weighted)
        )
        seed = config.get("seed", None)
        self._generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        special = set(self.tokenizer.all_special_ids)
        self.random_ids = torch.tensor([i for i in range(len(self.tokenizer)) if i not in special])
        units = {"L": self.max_seq_length, "R": self.max_regions, "1": 1}
        self._draws: Dict[str, slice] = {}
        start = 0
        for name, unit in self.DRAWS:
            size = sum(units[part] for part in unit.split("+"))
            self._draws[name] = slice(start, start + size)
            start += size
        self._draw_size = start

    # ------------------------------------------------------------ randomness
    def generator(self, override: Optional[torch.Generator] = None) -> Optional[torch.Generator]:
        """The generator to draw from (see the module docstring)."""
        if override is not None:
            return override
        if torch.utils.data.get_worker_info() is not None:
            return None
        return self._generator

    def draws(self, generators: Sequence[Optional[torch.Generator]]) -> Dict[str, torch.Tensor]:
        """Each sample's uniforms, by the names of ``DRAWS``: (B, size) each."""
        rows = uniform_draws(generators, self._draw_size)
        return {name: rows[:, part] for name, part in self._draws.items()}

    # ------------------------------------------------------------ one or a batch
    def __call__(
        self, item: RawItem, generator: Optional[torch.Generator] = None, padded: bool = True
    ) -> Sample:
        """The sample of one raw item, its draws from ``generator`` (see the module
        docstring); with ``padded=False`` its feature rows unpadded."""
        return self.batch([item], [generator], padded)[0]

    def batch(
        self,
        items: Sequence[RawItem],
        generators: Sequence[Optional[torch.Generator]],
        padded: bool = False,
    ) -> List[Sample]:
        """The samples of ``items``, item i's draws from ``generators[i]``: the text of all
        tokenized in one call, the masks drawn and applied to the whole batch at once, each
        sample the same as alone."""
        if len(generators) != len(items):
            raise ValueError(
                f"processor {type(self).__name__}: {len(items)} items but "
                f"{len(generators)} generators"
            )
        if not items:
            return []
        encodings = self.encode(items)
        draws = self.draws([self.generator(generator) for generator in generators])
        return self.split(self.mask(items, encodings, draws, padded), len(items))

    def encode(self, items: Sequence[RawItem]) -> List[Any]:
        """The tokenizer's output for each item, from one tokenizer call (no random draw):
        by default each item's ``sentence``, with its special-tokens mask."""
        return self.encode_sentences(
            items,
            f"processor {type(self).__name__}: raw input needs 'sentence' (str)",
            return_special_tokens_mask=True,
        )

    def mask(
        self,
        items: Sequence[RawItem],
        encodings: Sequence[Any],
        draws: Dict[str, torch.Tensor],
        padded: bool,
    ) -> Batch:
        """The batch's fields (see ``assemble``) from its items, encodings and draws."""
        raise NotImplementedError

    @staticmethod
    def split(batch: Batch, size: int) -> List[Sample]:
        """One sample dict per row of the batch's fields."""
        columns = {
            key: value.unbind(0) if torch.is_tensor(value) else value
            for key, value in batch.items()
        }
        return [{key: column[i] for key, column in columns.items()} for i in range(size)]

    # --------------------------------------------------------------- text
    def encode_sentences(
        self, items: Sequence[RawItem], needs: str, **options: Any
    ) -> List[Dict[str, list]]:
        """Every item's ``sentence`` tokenized (one tokenizer call for all), truncated to
        ``max_seq_length``; ``needs``: the error when an item has no sentence."""
        sentences = [item.get("sentence") for item in items]
        if not all(isinstance(sentence, str) for sentence in sentences):
            raise ValueError(needs)
        encoding = self.tokenizer(
            sentences, truncation=True, max_length=self.max_seq_length, **options
        )
        keys = list(encoding.keys())
        return [{key: encoding[key][i] for key in keys} for i in range(len(sentences))]

    def pad_text(self, ids: Sequence[int]) -> torch.Tensor:
        """Word-piece ids (L,) padded with [PAD] to ``max_seq_length``."""
        return padded_rows([ids], self.max_seq_length, self.tokenizer.pad_token_id)[0]

    def text_batch(self, ids: Sequence[Sequence[int]]) -> Tuple[torch.Tensor, torch.Tensor]:
        """(input_ids (B, L) padded with [PAD], input_mask (B, L) long)."""
        lengths = torch.tensor([len(row) for row in ids])
        mask = (torch.arange(self.max_seq_length) < lengths[:, None]).long()
        return padded_rows(ids, self.max_seq_length, self.tokenizer.pad_token_id), mask

    def corrupt(
        self, input_ids: torch.Tensor, selected: torch.Tensor, draws: Dict[str, torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """80/10/10 corruption of the ``selected`` (B, L) tokens with the ``kind`` and
        ``pick`` draws; returns (input_ids, lm_label_ids)."""
        return corrupt_tokens(
            input_ids,
            selected,
            draws["kind"],
            draws["pick"],
            self.tokenizer.mask_token_id,
            self.random_ids,
            self.mask_token_prob,
            self.random_token_prob,
        )

    def mask_sentences(
        self, encodings: Sequence[Mapping[str, list]], prob: float, draws: Dict[str, torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Standard MLM on encoded sentences (``encode_sentences`` with
        ``return_special_tokens_mask``): each word-piece (not [CLS], [SEP] or padding) is
        selected with ``prob`` (the ``select`` draws) and corrupted 80/10/10; returns
        (input_ids, lm_label_ids, input_mask), each (B, L)."""
        input_ids, input_mask = self.text_batch([e["input_ids"] for e in encodings])
        special = padded_rows([e["special_tokens_mask"] for e in encodings], self.max_seq_length, 1)
        selected = (special == 0) & (draws["select"] < prob)
        return (*self.corrupt(input_ids, selected, draws), input_mask)

    # --------------------------------------------------------------- regions
    def pack_regions(self, items: Sequence[RawItem], padded: bool) -> Batch:
        """The first ``max_regions`` regions of each item: 5-d boxes (B, R, 5) and mask
        (B, R) long, ``num_regions`` (the counts, a list), ``region_zeroed`` (B, R) bool
        (none yet) and ``region_features`` (= ``clean_region_features`` until masked): each
        item's (R, D) rows zero-padded when ``padded``, else its n real rows (a view)."""
        rows, boxes, counts, sizes, table_rows = [], [], [], [], []
        for item in items:
            for key in ("features", "boxes", "image_width", "image_height"):
                if item.get(key) is None:
                    raise ValueError(f"processor {type(self).__name__}: raw input needs '{key}'")
            features = torch.as_tensor(item["features"], dtype=torch.float32)
            box = torch.as_tensor(item["boxes"], dtype=torch.float32)
            if features.dim() != 2 or box.shape != (features.size(0), 4):
                raise ValueError(
                    f"processor {type(self).__name__}: 'features' must be (N, D) and 'boxes' "
                    f"(N, 4), got {tuple(features.shape)} and {tuple(box.shape)}"
                )
            n = min(features.size(0), self.max_regions)
            if padded:
                padded_features = features.new_zeros((self.max_regions, features.size(1)))
                padded_features[:n] = features[:n]
                rows.append(padded_features)
            else:
                rows.append(features[:n])
            boxes.append(box[:n])
            if item.get("feature_rows") is not None:
                table_rows.append(torch.as_tensor(item["feature_rows"], dtype=torch.long)[:n])
            counts.append(n)
            sizes.append((float(item["image_width"]), float(item["image_height"])))
        if any(width <= 0 or height <= 0 for width, height in sizes):
            raise ValueError(f"image width and height must be positive, got {sizes}")
        B, R = len(items), self.max_regions
        mask = torch.arange(R) < torch.tensor(counts)[:, None]  # (B, R) bool
        repeats = torch.tensor(counts)
        width, height = torch.tensor(sizes).repeat_interleave(repeats, dim=0).unbind(-1)
        box5 = torch.zeros(B, R, 5)
        box5[mask] = normalized_boxes(torch.cat(boxes), width, height)
        regions = {
            "region_features": rows,
            "clean_region_features": rows,
            "region_boxes": box5,
            "region_mask": mask.long(),
            "num_regions": counts,
            "region_zeroed": torch.zeros(B, R, dtype=torch.bool),
        }
        if table_rows:
            if len(table_rows) != B:
                raise ValueError(
                    f"processor {type(self).__name__}: 'feature_rows' in "
                    f"{len(table_rows)} of {B} raw inputs (all or none)"
                )
            feature_rows = torch.full((B, R), -1, dtype=torch.long)
            feature_rows[mask] = torch.cat(table_rows)
            regions[RESIDENT_ROWS] = feature_rows
        return regions

    def region_classes(self, items: Sequence[RawItem], counts: Sequence[int]) -> torch.Tensor:
        """The detector class ids (MRC targets) of each item's first regions, (B, R) padded
        with -1."""
        rows = []
        for item, n in zip(items, counts):
            classes = item.get("region_classes")
            if classes is None:
                raise ValueError(
                    f"processor {type(self).__name__}: raw input needs "
                    "'region_classes' (N,) detector class ids"
                )
            classes = torch.as_tensor(classes, dtype=torch.long).view(-1)
            if classes.numel() < n:
                raise ValueError(
                    f"processor {type(self).__name__}: 'region_classes' needs one "
                    f"entry per region of 'features' ({n}), got {classes.numel()}"
                )
            rows.append(classes[:n].tolist())
        return padded_rows(rows, self.max_regions, IGNORE)

    def zero_regions(
        self, regions: Batch, selected: torch.Tensor, zero_draws: torch.Tensor
    ) -> None:
        """Zero the features of each ``selected`` (B, R) region with probability
        ``zero_prob`` (the ``zero_draws``): sets ``region_zeroed`` and replaces
        ``region_features`` (the originals are left as they were)."""
        zeroed = selected & (zero_draws < self.zero_prob)
        regions["region_zeroed"] = zeroed
        any_zeroed = zeroed.any(1).tolist()
        regions["region_features"] = [
            rows.masked_fill(zeroed[i, : rows.size(0)].unsqueeze(-1), 0.0)
            if any_zeroed[i]
            else rows
            for i, rows in enumerate(regions["region_features"])
        ]

    def mask_regions(
        self,
        regions: Batch,
        classes: torch.Tensor,
        selected: torch.Tensor,
        zero_draws: torch.Tensor,
    ) -> Batch:
        """MRM on the ``selected`` (B, R) real regions of ``pack_regions``' output: zeroes
        their features (``zero_regions``) and returns the targets (``assemble`` keyword
        arguments): ``region_masked``, ``region_class_targets`` (their detector class, MRC)
        and ``region_features_target`` (the original features, MRFR)."""
        if bool((selected & (regions["region_mask"] == 0)).any()):
            raise ValueError("mask_regions: only real regions can be selected")
        original = regions["region_features"]
        self.zero_regions(regions, selected, zero_draws)
        return {
            "region_masked": selected.long(),
            "region_class_targets": torch.where(
                selected, classes, torch.full_like(classes, IGNORE)
            ),
            "region_features_target": original,
        }

    # --------------------------------------------------------------- fields
    def assemble(
        self,
        input_ids: torch.Tensor,
        lm_label_ids: torch.Tensor,
        input_mask: torch.Tensor,
        regions: Batch,
        itm_label: Optional[torch.Tensor] = None,
        text_boxes: Optional[torch.Tensor] = None,
        text_is_tag: Optional[torch.Tensor] = None,
        region_masked: Optional[torch.Tensor] = None,
        region_class_targets: Optional[torch.Tensor] = None,
        region_phrase_targets: Optional[torch.Tensor] = None,
        region_features_target: Optional[List[torch.Tensor]] = None,
        clean_input_ids: Optional[torch.Tensor] = None,
    ) -> Batch:
        """The batch-contract fields of the batch (defaults: nothing masked / no tags; the
        MRFR target only when given; the clean pair when ``curriculum_weighted``, its text
        ``clean_input_ids`` or else ``input_ids`` with every MLM target restored)."""
        B, L = input_ids.shape
        R, P = self.max_regions, self.max_phrase_tokens
        label = itm_label if itm_label is not None else torch.full((B,), IGNORE)
        batch = {
            "input_ids": input_ids,
            "input_mask": input_mask,
            "segment_ids": torch.zeros(B, L, dtype=torch.long),
            "lm_label_ids": lm_label_ids,
            "text_boxes": text_boxes if text_boxes is not None else torch.zeros(B, L, 5),
            "text_is_tag": (
                text_is_tag if text_is_tag is not None else torch.zeros(B, L, dtype=torch.long)
            ),
            "region_features": regions["region_features"],
            "region_boxes": regions["region_boxes"],
            "region_mask": regions["region_mask"],
            "region_zeroed": regions["region_zeroed"],
            **({RESIDENT_ROWS: regions[RESIDENT_ROWS]} if RESIDENT_ROWS in regions else {}),
            "region_masked": (
                region_masked if region_masked is not None else torch.zeros(B, R, dtype=torch.long)
            ),
            "region_class_targets": (
                region_class_targets
                if region_class_targets is not None
                else torch.full((B, R), IGNORE, dtype=torch.long)
            ),
            "region_phrase_targets": (
                region_phrase_targets
                if region_phrase_targets is not None
                else torch.full((B, R, P), IGNORE, dtype=torch.long)
            ),
            "itm_label": label,
            "curriculum_weighted": torch.full((B,), self.curriculum_weighted),
            "targets": label.clone(),
        }
        if region_features_target is not None:
            batch["region_features_target"] = region_features_target
        if self.curriculum_weighted:
            if clean_input_ids is None:
                clean_input_ids = restore_targets(input_ids, lm_label_ids)
            batch["clean_input_ids"] = clean_input_ids
            batch["clean_region_features"] = regions["clean_region_features"]
        return batch
