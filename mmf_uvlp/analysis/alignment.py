"""Do words, tags and regions of one class meet in the model's space? (U-VisualBERT Fig. 2)

An *instance* is a one-box entity of a caption whose gold box is matched by a detected
region (IoU >= 0.5); its class is the phrase's root word ("a red car" -> ``car``). For the
most frequent classes (at most ``per_class`` instances each, sampled with the seed) a
system gives three last-layer representations:

- word: the root word's pieces, in the caption with the image's regions;
- region: the matched region, in that same input;
- tag (``uvla`` with detector class names only): the matched region's tag pieces in the
  R-T input ``[CLS] tags [SEP]`` + regions.

The number: mean reciprocal rank of each region's true class among all sampled classes,
ranking the classes by the cosine between the region and the class's mean word vector.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from mmf_uvlp.analysis.batches import batches
from mmf_uvlp.analysis.examples import Example
from mmf_uvlp.analysis.grounding import region_hits
from mmf_uvlp.analysis.regions import RegionStore
from mmf_uvlp.analysis.systems import System, make_batch
from mmf_uvlp.processors.region_tag_masking import tag_word_pieces
from mmf_uvlp.utils.boxes import iou


@dataclass(frozen=True)
class Instance:
    """A class word of a caption and the region showing it."""

    example: Example
    cls: str
    word: int  # the class word's index in the caption
    region: int  # the matched region's index in the image


def find_instances(examples: Iterable[Example], store: RegionStore) -> list[Instance]:
    """Every one-box entity with a matching region (the region of highest IoU)."""
    import torch

    instances = []
    for example in examples:
        image = store[example.image_id]
        for source in example.entities:
            if len(source.gold) != 1 or not len(image):
                continue
            hits = region_hits(image.boxes, np.array(source.gold))
            if not hits.any():
                continue
            overlap = iou(torch.from_numpy(image.boxes), torch.tensor(source.gold)).numpy()[:, 0]
            word = source.target_root
            instances.append(
                Instance(
                    example,
                    example.words[word].lower(),
                    word,
                    int(np.argmax(np.where(hits, overlap, -1.0))),
                )
            )
    return instances


def sample_instances(
    instances: list[Instance], classes: int, per_class: int, seed: int
) -> list[Instance]:
    """The ``classes`` most frequent classes (ties by name), ``per_class`` instances each."""
    counts = Counter(i.cls for i in instances)
    chosen = sorted(counts, key=lambda c: (-counts[c], c))[:classes]
    rng = np.random.default_rng(seed)
    sample = []
    for cls in chosen:
        members = [i for i in instances if i.cls == cls]
        keep = sorted(rng.choice(len(members), min(per_class, len(members)), replace=False))
        sample += [members[k] for k in keep]
    return sample


@dataclass
class Representations:
    """Vectors with their class and modality (word, region or tag)."""

    vectors: np.ndarray  # (N, hidden)
    classes: list[str]
    modalities: list[str]


def represent(
    system: System,
    instances: list[Instance],
    store: RegionStore,
    tokenizer=None,
    max_length: int = 64,
    batch_size: int = 16,
) -> Representations:
    """Word and region (and, when possible, tag) vectors of every instance."""
    by_example: dict[str, list[Instance]] = {}
    for instance in instances:
        by_example.setdefault(instance.example.key, []).append(instance)
    examples = [group[0].example for group in by_example.values()]
    vectors, classes, modalities = [], [], []
    for group, regions, batch in batches(examples, store, batch_size):
        hidden = system(batch, attentions=False).hidden.numpy()
        for b, example in enumerate(group):
            for instance in by_example[example.key]:
                tokens = list(example.word_tokens[instance.word])
                vectors += [
                    hidden[b, tokens].mean(axis=0),
                    hidden[b, batch.text_length + instance.region],
                ]
                classes += [instance.cls, instance.cls]
                modalities += ["word", "region"]
        if not (system.supports_tags and tokenizer is not None and all(r.labels for r in regions)):
            continue
        inputs = [tag_word_pieces(tokenizer, image.labels, max_length) for image in regions]
        tag_batch = make_batch([ids for ids, _ in inputs], regions, [o for _, o in inputs])
        tag_hidden = system(tag_batch, attentions=False).hidden.numpy()
        for b, example in enumerate(group):
            owners = np.array(inputs[b][1])
            for instance in by_example[example.key]:
                positions = np.flatnonzero(owners == instance.region)
                if len(positions):
                    vectors.append(tag_hidden[b, positions].mean(axis=0))
                    classes.append(instance.cls)
                    modalities.append("tag")
    return Representations(np.array(vectors, dtype=np.float64), classes, modalities)


def region_word_mrr(reps: Representations) -> tuple[float, float]:
    """(MRR of each region's class among the class word centroids by cosine, chance MRR)."""
    classes = np.array(reps.classes)
    modalities = np.array(reps.modalities)
    names = sorted(set(reps.classes))
    unit = reps.vectors / np.linalg.norm(reps.vectors, axis=1, keepdims=True).clip(min=1e-12)
    centroids = np.stack(
        [unit[(classes == c) & (modalities == "word")].mean(axis=0) for c in names]
    )
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True).clip(min=1e-12)
    regions = modalities == "region"
    similarity = unit[regions] @ centroids.T  # (regions, classes)
    truth = np.array([names.index(c) for c in classes[regions]])
    true_score = similarity[np.arange(len(truth)), truth]
    ranks = 1 + (similarity > true_score[:, None]).sum(axis=1)
    chance = float(np.mean(1.0 / np.arange(1, len(names) + 1)))
    return float(np.mean(1.0 / ranks)), chance


def tsne(vectors: np.ndarray, seed: int) -> np.ndarray:
    """2-d t-SNE (scikit-learn) of ``vectors``; perplexity capped for small samples."""
    from sklearn.manifold import TSNE

    n = len(vectors)
    if n < 4:
        raise ValueError(f"t-SNE needs at least 4 points, got {n}: sample more classes or images")
    perplexity = float(min(30, (n - 1) / 3))
    return TSNE(
        n_components=2, perplexity=perplexity, init="pca", random_state=seed, learning_rate="auto"
    ).fit_transform(vectors)
