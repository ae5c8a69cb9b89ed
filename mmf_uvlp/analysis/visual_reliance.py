"""Visual reliance: does a pre-trained model read a caption's object words off the image?

For each held-out caption of the pre-training pool (``text/captions_gt.tsv`` with the
pool's region features), one word-piece that starts a detector class name is masked and
the model's MLM loss on it is measured twice: with the caption's own image and with the
regions of another held-out image (the next one). A model that uses the image predicts
the word better from its own image, so the mean paired difference ``other - own`` (nats)
is positive; a model that ignores the regions gives exactly 0. The spread is the
paired standard error over captions.

Held-out images are those whose position in ``captions_gt.tsv`` is a multiple of
``holdout_every`` (the pre-training datasets' rule: 50 in the project configs), so the
probe never scores a pair the model was trained on.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
import torch.nn.functional as F

from mmf_uvlp.analysis.regions import ImageRegions, RegionStore
from mmf_uvlp.analysis.systems import make_batch


@dataclass(frozen=True)
class Probe:
    """One held-out caption: its word-piece ids, the masked position and the image ids."""

    input_ids: tuple[int, ...]
    position: int
    target: int
    image_id: str
    other_image_id: str


@dataclass(frozen=True)
class Reliance:
    """MLM loss (nats) on the masked class words with the own / another image."""

    captions: int
    own: float
    other: float
    gain: float  # mean of (other - own) over captions
    stderr: float  # paired standard error of gain

    def to_json(self) -> dict[str, Any]:
        return {
            "captions": self.captions,
            "own_image_nats": self.own,
            "other_image_nats": self.other,
            "gain_nats": self.gain,
            "gain_stderr": self.stderr,
        }


def class_word_starts(tokenizer: Any, class_names: Iterable[str]) -> set[int]:
    """The first word-piece id of every class name."""
    return {tokenizer(name, add_special_tokens=False)["input_ids"][0] for name in class_names}


def held_out_captions(
    captions: Sequence[tuple[str, str]], holdout_every: int
) -> list[tuple[str, str]]:
    """The (image id, caption) rows the pre-training datasets hold out: every
    ``holdout_every``-th, from the first; at least 2."""
    if holdout_every < 1:
        raise ValueError(f"holdout_every must be >= 1, got {holdout_every}")
    held_out = [row for position, row in enumerate(captions) if position % holdout_every == 0]
    if len(held_out) < 2:
        raise ValueError(
            f"{len(captions)} captions hold out {len(held_out)} with "
            f"holdout_every={holdout_every}; the probe needs at least 2"
        )
    return held_out


def make_probes(
    captions: Sequence[tuple[str, str]],
    tokenizer: Any,
    starts: set[int],
    holdout_every: int,
    max_length: int,
    seed: int,
) -> list[Probe]:
    """One probe per held-out caption that mentions a class (the masked word drawn with
    ``seed``); the other image is the next held-out one."""
    held_out = held_out_captions(captions, holdout_every)
    rng = random.Random(seed)
    probes = []
    for k, (image_id, caption) in enumerate(held_out):
        ids = tokenizer(caption, truncation=True, max_length=max_length)["input_ids"]
        candidates = [i for i, token in enumerate(ids) if token in starts]
        if not candidates:
            continue
        position = rng.choice(candidates)
        other = held_out[(k + 1) % len(held_out)][0]
        probes.append(Probe(tuple(ids), position, ids[position], image_id, other))
    return probes


def _losses(
    model: torch.nn.Module, probes: Sequence[Probe], regions: Sequence[ImageRegions], mask_id: int
) -> torch.Tensor:
    """Per-probe MLM loss (nats) with the given regions."""
    token_ids = []
    for probe in probes:
        ids = list(probe.input_ids)
        ids[probe.position] = mask_id
        token_ids.append(ids)
    batch = make_batch(token_ids, regions).fields()
    rows = torch.arange(len(probes))
    positions = torch.tensor([p.position for p in probes])
    with torch.no_grad():
        hidden = model.encode(batch).text[rows, positions]  # (B, H)
        logits = model.heads["mlm"].vocab_head(hidden)  # (B, V)
    return F.cross_entropy(logits, torch.tensor([p.target for p in probes]), reduction="none")


def measure(
    model: torch.nn.Module,
    probes: Sequence[Probe],
    store: RegionStore,
    mask_id: int,
    batch_size: int = 64,
) -> Reliance:
    """Mean MLM loss with own and other regions, and the paired gain with its std error."""
    if not probes:
        raise ValueError("no held-out caption mentions a detector class: nothing to probe")
    model.eval()
    own, other = [], []
    for start in range(0, len(probes), batch_size):
        chunk = probes[start : start + batch_size]
        own.append(_losses(model, chunk, [store[p.image_id] for p in chunk], mask_id))
        other.append(_losses(model, chunk, [store[p.other_image_id] for p in chunk], mask_id))
    own_t, other_t = torch.cat(own), torch.cat(other)
    gain = other_t - own_t
    return Reliance(
        gain.numel(),
        float(own_t.mean()),
        float(other_t.mean()),
        float(gain.mean()),
        paired_stderr(gain),
    )


def paired_stderr(differences: torch.Tensor) -> float:
    """Standard error of the mean of paired differences (nan for fewer than 2)."""
    n = differences.numel()
    return float(differences.std(unbiased=True)) / math.sqrt(n) if n > 1 else float("nan")


def pool_paths(world: str | os.PathLike) -> tuple[Path, Path]:
    """``captions_gt.tsv`` and the pre-training pool's feature LMDB of a toy world."""
    root = Path(world)
    captions, features = root / "text" / "captions_gt.tsv", root / "features" / "cc.lmdb"
    for path in (captions, features):
        if not path.exists():
            raise FileNotFoundError(
                f"{path}: not found (expected a toy world's pre-training "
                "pool: text/captions_gt.tsv and features/cc.lmdb)"
            )
    return captions, features


def load_pretrained(
    config: Any, feature_dim: int, spec: str, heads: Sequence[str] = ("mlm",), trust: bool = False
) -> torch.nn.Module:
    """A uvla with pre-trained ``heads`` (``mlm``, ``mrc``, ...): ``spec`` a state dict
    (``uvla_final.pth``) or an MMF ``.ckpt`` of a uvla pre-training run that has them,
    loaded with ``weights_only`` unless ``trust`` (``--trust-checkpoint``)."""
    from omegaconf import OmegaConf

    from mmf_uvlp.analysis.systems import TRUST_HINT
    from mmf_uvlp.models.uvla import UVLA, read_uvla_state

    if not os.path.isfile(spec):
        raise FileNotFoundError(
            f"{spec}: no such checkpoint (expected a uvla pre-training uvla_final.pth or MMF .ckpt)"
        )
    state = read_uvla_state(spec, trust, trust_hint=TRUST_HINT)
    prefixes = tuple(f"heads.{head}." for head in heads)
    for head, prefix in zip(heads, prefixes):
        if not any(key.startswith(prefix) for key in state):
            raise ValueError(
                f"{spec}: no {head.upper()} head ({prefix}*); the probe reads a "
                f"pre-trained uvla's own {head.upper()} head"
            )
    config = OmegaConf.merge(
        config,
        {
            "feature_dim": feature_dim,
            "pretrained_checkpoint": None,
            "heads": list(heads),
            "losses": [],
            "curriculum": {"enabled": False},
            "output_attentions": False,
        },
    )
    model = UVLA(config)
    model.build()
    wanted = {
        key: value
        for key, value in state.items()
        if key.startswith(("embeddings.", "encoder.", "pooler.", *prefixes))
    }
    result = model.load_state_dict(wanted, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"{spec}: does not fit model_config.uvla (missing "
            f"{result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]})"
        )
    return model
