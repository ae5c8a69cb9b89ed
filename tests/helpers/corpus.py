"""Shared fixtures of the corpus-builder tests (no tests here).

Models (MiniLM, spaCy, GloVe) are loaded once per process through ``shared_resources``.
``write_tiny_world`` writes a six-image world with hand-checkable answers (W = H = 100):

    img0: dog .9 (0,0,50,50), frisbee .8 (50,50,70,70), grass .2 (low conf),
          dog .7 (60,0,100,30), ball .9 (0,0,5,5: 0.25% of the image)  -> "dog frisbee"
          (dog: 10*2/3 + 10*.25 = 9.17; frisbee: 10/3 + 10*.04 = 3.73)
    img1: man .95 (area .4), horse .9 (.8), hat .5 (exactly 1%)       -> "horse man hat"
    img2: pizza, table, plate                                          -> "table plate pizza"
    img3: cat, couch                                                   -> "couch cat"
    img4: only a .1-confidence cat                                     -> dropped (no tag)
    img5: bus, street, car                                             -> "street bus car"
"""

from __future__ import annotations

import base64
import functools
import json
import os
from typing import Dict, List, Optional

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@functools.lru_cache(maxsize=None)
def shared_resources():
    from mmf_uvlp.corpus.pipeline import Resources

    return Resources()


def obj(rect, cls, conf):
    return {"rect": rect, "class": cls, "conf": conf, "attributes": [], "attr_scores": []}


IMAGES = [
    (
        "img0",
        [
            obj([0, 0, 50, 50], "dog", 0.9),
            obj([50, 50, 70, 70], "frisbee", 0.8),
            obj([0, 50, 100, 100], "grass", 0.2),
            obj([60, 0, 100, 30], "dog", 0.7),
            obj([0, 0, 5, 5], "ball", 0.9),
        ],
    ),
    (
        "img1",
        [
            obj([10, 10, 60, 90], "man", 0.95),
            obj([0, 20, 100, 100], "horse", 0.9),
            obj([20, 10, 30, 20], "hat", 0.5),
        ],
    ),
    (
        "img2",
        [
            obj([10, 10, 60, 60], "pizza", 0.9),
            obj([0, 40, 100, 100], "table", 0.8),
            obj([5, 5, 70, 70], "plate", 0.6),
        ],
    ),
    ("img3", [obj([0, 0, 40, 40], "cat", 0.9), obj([0, 30, 100, 100], "couch", 0.85)]),
    ("img4", [obj([0, 0, 40, 40], "cat", 0.1)]),
    (
        "img5",
        [
            obj([0, 0, 80, 60], "bus", 0.9),
            obj([0, 50, 100, 100], "street", 0.7),
            obj([80, 60, 95, 75], "car", 0.5),
        ],
    ),
]
TAG_QUERIES = {
    "img0": "dog frisbee",
    "img1": "horse man hat",
    "img2": "table plate pizza",
    "img3": "couch cat",
    "img5": "street bus car",
}
SENTENCES = [
    "A dog catches a frisbee in the park.",
    "A man riding a horse on the beach.",
    "A pizza on a plate on a wooden table.",
    "A cat sleeping on a red sofa.",
    "A red bus driving down the street.",
    "The stock market fell sharply today.",
    "Two dogs play with a frisbee on the grass.",
    "a dog catches a frisbee in the park",
    "A cowboy on his horse wearing a hat.",
    "Cars and buses in a busy street.",
    "He ate the whole cake.",
    "A kitten on the couch.",
]
CAPTIONS = {"img0": 0, "img1": 1, "img2": 2, "img3": 3, "img5": 4}
FEATURE_DIM = 8


def features_row(image_id: str, n: int, seed: int = 0, dim: int = FEATURE_DIM) -> str:
    rng = np.random.default_rng(seed)
    feats = rng.random((n, dim + 6), dtype=np.float32)
    return f"{image_id}\t{n}\t{base64.b64encode(feats.tobytes()).decode()}"


def predictions_row(image_id: str, objects: List[dict], w: int = 100, h: int = 100) -> str:
    return (
        image_id
        + "\t"
        + json.dumps({"image_h": h, "image_w": w, "num_boxes": len(objects), "objects": objects})
    )


def write_tiny_world(
    root,
    predictions_lines: Optional[List[str]] = None,
    features_lines: Optional[List[str]] = None,
    corpus_bytes: Optional[bytes] = None,
) -> Dict[str, str]:
    root = str(root)
    os.makedirs(root, exist_ok=True)
    paths = {
        k: os.path.join(root, v)
        for k, v in {
            "predictions": "predictions.tsv",
            "features": "features.tsv",
            "corpus": "corpus.txt",
            "captions_gt": "captions.tsv",
            "objects_gt": "objects.jsonl",
        }.items()
    }
    if predictions_lines is None:
        predictions_lines = [predictions_row(i, o) for i, o in IMAGES]
    if features_lines is None:
        features_lines = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    with open(paths["predictions"], "w") as f:
        f.write("\n".join(predictions_lines) + "\n")
    with open(paths["features"], "w") as f:
        f.write("\n".join(features_lines) + "\n")
    with open(paths["corpus"], "wb") as f:
        f.write(
            corpus_bytes if corpus_bytes is not None else ("\n".join(SENTENCES) + "\n").encode()
        )
    with open(paths["captions_gt"], "w") as f:
        for image_id, sid in CAPTIONS.items():
            f.write(f"{image_id}\t{SENTENCES[sid]}\n")
    with open(paths["objects_gt"], "w") as f:
        for image_id, objects in IMAGES:
            f.write(
                json.dumps(
                    {"image_id": image_id, "objects": [{"class": o["class"]} for o in objects]}
                )
                + "\n"
            )
    return paths


def tiny_config(paths: Dict[str, str], *overrides: str, gt: bool = True):
    from mmf_uvlp.corpus.config import load_config

    data = {
        "inputs": {
            "predictions": paths["predictions"],
            "features": paths["features"],
            "corpus": [paths["corpus"]],
        },
        "retrieve": {"k": 3},
        "output": {"chunk_images": 2},
        "embed": {"chunk_size": 5, "batch_size": 4},
        # One thread: the thread count sets the order BLAS sums floats in, so a build in
        # this process and one in a subprocess or a job agree to the byte only at equal counts.
        "run": {"progress": False, "num_threads": 1},
        "report": {"num_examples": 3},
    }
    if gt:
        data["inputs"]["captions_gt"] = paths["captions_gt"]
        data["inputs"]["objects_gt"] = paths["objects_gt"]
    return load_config(data=data, overrides=list(overrides))


def tiny_command(paths: Dict[str, str], action: str, out: str) -> List[str]:
    """``tools/build_corpus.py ACTION``'s command line with :func:`tiny_config`'s settings."""
    import sys

    from helpers import REPO

    inputs = ("predictions", "features", "corpus", "captions_gt", "objects_gt")
    command = [sys.executable, str(REPO / "tools" / "build_corpus.py"), action]
    for name in inputs:
        command += ["--" + name.replace("_", "-"), paths[name]]
    command += ["--k", "3", "--chunk-images", "2", "--no-progress", "--out", str(out)]
    for value in ("embed.chunk_size=5", "embed.batch_size=4", "report.num_examples=3"):
        command += ["--set", value]
    return command + ["--set", "run.num_threads=1"]  # tiny_config's thread count


def output_files(out_dir: str) -> Dict[str, bytes]:
    """The deterministic outputs of a build: annotations, index, stats, report.json/md."""
    found = {}
    for sub in ("annotations", "stats", "report"):
        directory = os.path.join(out_dir, sub)
        for name in sorted(os.listdir(directory)):
            if name.endswith(".png"):
                continue
            with open(os.path.join(directory, name), "rb") as handle:
                found[f"{sub}/{name}"] = handle.read()
    return found
