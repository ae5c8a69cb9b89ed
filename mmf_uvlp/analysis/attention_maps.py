"""Each word's attention over the image's regions, for a chosen layer or head (μ-VLA Fig. 5).

A *head selection* is ``last`` (the heads of the last layer), ``layer:N`` (the heads of
layer N, 1-based) or ``best`` (the system's best entity-grounding head in a probe
report, ``probe.json``). A word's weights are its word-pieces' attention to each real
region, averaged over the pieces and the selected heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from mmf_uvlp.analysis.examples import Example


@dataclass(frozen=True)
class HeadSelection:
    """0-based layer and head indices, and how to name them."""

    layer: int
    heads: tuple[int, ...]
    label: str


def select_heads(
    spec: str, layers: int, heads: int, probe: Mapping | None = None, system: str | None = None
) -> HeadSelection:
    """Parse ``last`` / ``layer:N`` / ``best`` for a system with ``layers`` x ``heads``."""
    if spec == "last":
        return HeadSelection(layers - 1, tuple(range(heads)), f"layer {layers}, mean of heads")
    if spec.startswith("layer:"):
        number = spec.split(":", 1)[1]
        if not number.isdigit() or not 1 <= int(number) <= layers:
            raise ValueError(f"--layer {spec!r}: expected layer:N with N in 1..{layers}")
        return HeadSelection(int(number) - 1, tuple(range(heads)), f"layer {number}, mean of heads")
    if spec == "best":
        if probe is None or system not in probe.get("systems", {}):
            raise ValueError(f"--layer best needs --probe, a probe.json with system {system!r}")
        best = probe["systems"][system]["entity"]["best_head"]
        if best["layer"] > layers or best["head"] > heads:
            raise ValueError(
                f"probe head {best['layer']}-{best['head']} of {system!r} does "
                f"not exist in a model of {layers} x {heads} heads"
            )
        return HeadSelection(
            best["layer"] - 1,
            (best["head"] - 1,),
            f"head {best['layer']}-{best['head']} (best entity grounding)",
        )
    raise ValueError(f"--layer {spec!r}: expected 'last', 'layer:N' or 'best'")


def word_weights(
    maps: np.ndarray, example: Example, selection: HeadSelection, regions: int
) -> np.ndarray:
    """(words, regions): ``maps`` (layers, heads, L, R) of one example, real regions only."""
    chosen = maps[selection.layer][list(selection.heads)][:, :, :regions]  # (h, L, regions)
    weights = np.zeros((len(example.words), regions))
    for w, tokens in enumerate(example.word_tokens):
        if tokens:
            weights[w] = chosen[:, list(tokens)].mean(axis=(0, 1))
    return weights


def word_gold(example: Example) -> list[list[list[float]]]:
    """Per word, the gold boxes of the entity of the innermost grounded phrase holding it."""
    gold: list[list[list[float]]] = [[] for _ in example.words]
    for source in sorted(example.entities, key=lambda s: -len(s.tokens)):
        for w, tokens in enumerate(example.word_tokens):
            if tokens and set(tokens) <= set(source.tokens):
                gold[w] = [list(box) for box in source.gold]
    return gold


def shown_words(example: Example) -> list[int]:
    """Indices of the words to draw: those with a letter or digit that survived truncation."""
    return [
        w
        for w, word in enumerate(example.words)
        if example.word_tokens[w] and any(c.isalnum() for c in word)
    ]
