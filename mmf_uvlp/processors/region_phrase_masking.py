"""``uvla_region_phrase_masking``: R-N samples, input [retrieved sentence; regions].

Raw input: the common image keys (see ``masking.py``) plus ``sentence`` (str) and
``noun_phrases``: the sentence's phrases as the corpus writes them, each a dict with
``char_span`` [start, end) into ``sentence``, ``region`` (index into ``features``, or
null), ``link_score`` (>= 0) and optionally ``linked`` (bool).

Linked items. A phrase is linked when ``linked`` is not false, ``region`` is a kept
region (< ``max_regions``), ``link_score`` > 0, and at least one of its word-pieces
(those overlapping ``char_span`` in the truncated sentence, minus ``phrase_stop_tokens``,
default "a", "an", "the") remains. A linked region's score is the largest score of its
phrases and its p-MRTC target the word-pieces of all its phrases (first
``max_phrase_tokens``).

Masking, one modality per sample: with probability ``text_modality_prob`` (0.5) the
linked phrases are the items, else the linked regions. With K items of scores s_k,
item k is masked independently with probability

    p_k = min(1, linked_mask_ratio * K * s_k / sum_j s_j)

(``linked_mask_ratio`` 0.5: the mean rate over items when nothing is clipped). With
``ensure_one`` (true) and nothing drawn, one item is drawn with probability
s_k / sum_j s_j; this keeps every item's overall masking probability proportional to its
score. A masked phrase's word-pieces are corrupted 80/10/10 (MLM targets); a masked
region's features are zeroed with ``zero_prob`` and it gets the p-MRTC target. A sample
without linked items is left unmasked. Nothing outside the linked items (other words,
unlinked regions, [CLS], [SEP], padding) is ever masked. ``curriculum_weighted``
defaults to true.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import torch

from mmf.common.registry import registry
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.processors.masking import (
    IGNORE,
    Batch,
    RawItem,
    UVLAMaskingProcessor,
    probability_param,
)

DEFAULT_STOP_TOKENS = ("a", "an", "the")
LinkedPhrase = Tuple[List[int], int, float]  # (token positions, region, link score)


def linked_mask_probabilities(scores: torch.Tensor, ratio: float) -> torch.Tensor:
    """``min(1, ratio * K * s_k / sum(s))`` for K scores (K,)."""
    return (ratio * scores.numel() * scores / scores.sum()).clamp(max=1.0)


def draw_linked(
    scores: Sequence[float],
    ratio: float,
    ensure_one: bool,
    draws: Sequence[float],
    ensure_draw: float,
) -> List[bool]:
    """The masked items among K scores (see the module docstring): item k when its uniform
    ``draws[k]`` falls below its probability; with ``ensure_one`` and none, the item where
    ``ensure_draw`` falls in the scores' cumulative distribution."""
    probabilities = linked_mask_probabilities(
        torch.tensor(scores, dtype=torch.float64), ratio
    ).tolist()
    chosen = [draw < p for draw, p in zip(draws, probabilities)]
    if ensure_one and not any(chosen):
        total, cumulative = sum(scores), 0.0
        pick = len(scores) - 1
        for k, score in enumerate(scores):
            cumulative += score
            if ensure_draw * total < cumulative:
                pick = k
                break
        chosen[pick] = True
    return chosen


def item_draws(row: Sequence[float], count: int) -> Sequence[float]:
    """``count`` uniforms for a sample's linked items: its row of draws, continued (for
    more items than the row holds) from a generator seeded by the row itself."""
    if count <= len(row):
        return row
    generator = torch.Generator().manual_seed(int(row[0] * 2**53))
    return (
        list(row) + torch.rand(count - len(row), generator=generator, dtype=torch.float64).tolist()
    )


@registry.register_processor("uvla_region_phrase_masking")
class RegionPhraseMaskingProcessor(UVLAMaskingProcessor):
    """R-N: mask linked phrase tokens (MLM) or linked regions (p-MRTC), one modality per sample.

    Extra params: ``text_modality_prob`` (0.5), ``linked_mask_ratio`` (0.5),
    ``ensure_one`` (true), ``phrase_stop_tokens`` (["a", "an", "the"]).
    """

    default_curriculum_weighted = True
    DRAWS = (
        ("modality", "1"),
        ("ensure", "1"),
        ("items", "L+R"),
        ("kind", "L"),
        ("pick", "L"),
        ("zero", "R"),
    )

    def __init__(self, config: Mapping[str, Any], *args: Any, **kwargs: Any):
        super().__init__(config, *args, **kwargs)
        config = config or {}
        self.text_modality_prob = probability_param(
            type(self).__name__, "text_modality_prob", config.get("text_modality_prob", 0.5)
        )
        ratio = config.get("linked_mask_ratio", 0.5)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
            raise UserConfigError(
                f"processor {type(self).__name__}: params.linked_mask_ratio must be a number "
                f"> 0, got {ratio!r}"
            )
        self.linked_mask_ratio = float(ratio)
        self.ensure_one = bool(config.get("ensure_one", True))
        stop = config.get("phrase_stop_tokens", DEFAULT_STOP_TOKENS)
        self.stop_ids = set(self.tokenizer.convert_tokens_to_ids(list(stop)))

    def _linked_phrases(
        self,
        phrases: Sequence[Mapping[str, Any]],
        offsets: List[List[int]],
        special: List[int],
        ids: List[int],
        num_regions: int,
    ) -> List[LinkedPhrase]:
        """[(token positions, region, score)] of the linked phrases that survive truncation."""
        linked = []
        for k, phrase in enumerate(phrases):
            region, score = phrase.get("region"), float(phrase.get("link_score", 0.0) or 0.0)
            if score < 0 or score != score:
                raise ValueError(
                    f"uvla_region_phrase_masking: noun_phrases[{k}].link_score "
                    f"must be >= 0, got {phrase.get('link_score')!r}"
                )
            if phrase.get("linked", True) is False or region is None or score <= 0:
                continue
            if not 0 <= int(region) < num_regions:
                continue
            span = phrase.get("char_span")
            if span is None or len(span) != 2:
                raise ValueError(
                    f"uvla_region_phrase_masking: noun_phrases[{k}].char_span must be [start, end)"
                )
            start, end = int(span[0]), int(span[1])
            positions = [
                t
                for t, (a, b) in enumerate(offsets)
                if not special[t]
                and b > a
                and a < end
                and b > start
                and ids[t] not in self.stop_ids
            ]
            if positions:
                linked.append((positions, int(region), score))
        return linked

    def encode(self, items: Sequence[RawItem]) -> List[Dict[str, list]]:
        needs = (
            "uvla_region_phrase_masking: raw input needs 'sentence' (str) and "
            "'noun_phrases' (list of {char_span, region, link_score})"
        )
        if any(item.get("noun_phrases") is None for item in items):
            raise ValueError(needs)
        return self.encode_sentences(
            items, needs, return_offsets_mapping=True, return_special_tokens_mask=True
        )

    def mask(
        self,
        items: Sequence[RawItem],
        encodings: Sequence[Dict[str, list]],
        draws: Dict[str, torch.Tensor],
        padded: bool,
    ) -> Batch:
        regions = self.pack_regions(items, padded)
        B, L, R = len(items), self.max_seq_length, self.max_regions
        input_ids, input_mask = self.text_batch([e["input_ids"] for e in encodings])
        selected = torch.zeros(B, L, dtype=torch.bool)
        region_masked = torch.zeros(B, R, dtype=torch.bool)
        phrase_targets = torch.full((B, R, self.max_phrase_tokens), IGNORE, dtype=torch.long)
        modality = draws["modality"][:, 0].tolist()
        ensure = draws["ensure"][:, 0].tolist()
        rows = draws["items"].tolist()
        for i, (item, encoding) in enumerate(zip(items, encodings)):
            ids = encoding["input_ids"]
            linked = self._linked_phrases(
                item["noun_phrases"],
                encoding["offset_mapping"],
                encoding["special_tokens_mask"],
                ids,
                regions["num_regions"][i],
            )
            if not linked:
                continue
            if modality[i] < self.text_modality_prob:
                chosen = draw_linked(
                    [score for _, _, score in linked],
                    self.linked_mask_ratio,
                    self.ensure_one,
                    item_draws(rows[i], len(linked)),
                    ensure[i],
                )
                positions = [
                    t for (places, _, _), take in zip(linked, chosen) if take for t in places
                ]
                selected[i, positions] = True
            else:
                by_region: Dict[int, Tuple[List[int], float]] = {}  # word-pieces, score
                for places, region, score in linked:
                    pieces, best = by_region.get(region, ([], 0.0))
                    by_region[region] = (pieces + [ids[t] for t in places], max(best, score))
                order = sorted(by_region)
                chosen = draw_linked(
                    [by_region[r][1] for r in order],
                    self.linked_mask_ratio,
                    self.ensure_one,
                    item_draws(rows[i], len(order)),
                    ensure[i],
                )
                for region, take in zip(order, chosen):
                    if take:
                        pieces = by_region[region][0][: self.max_phrase_tokens]
                        phrase_targets[i, region, : len(pieces)] = torch.tensor(pieces)
                        region_masked[i, region] = True
        input_ids, lm_label_ids = self.corrupt(input_ids, selected, draws)
        self.zero_regions(regions, region_masked, draws["zero"])
        return self.assemble(
            input_ids,
            lm_label_ids,
            input_mask,
            regions,
            region_masked=region_masked.long(),
            region_phrase_targets=phrase_targets,
        )
