"""Command-line arguments shared by the analysis tools, and what they load.

Data: ``--world DIR`` (a generated toy world: its ``flickr30k_entities/``, the
``flickr30k`` pool's MMF features and ``vocabulary.json``) or, for real data,
``--entities ROOT --features PATH [--class-names FILE]``. Models: ``--model NAME=SPEC``
(see :mod:`mmf_uvlp.analysis.systems`), built from ``--config`` and ``--opt`` overrides.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmf_uvlp.analysis.examples import Example, ExampleBuilder
from mmf_uvlp.analysis.regions import RegionStore, read_class_names
from mmf_uvlp.analysis.systems import System, load_system, parse_model_args, uvla_config
from mmf_uvlp.data_formats.flickr30k_entities import SPLITS, Flickr30kEntities
from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.config_files import home

REPO = home()  # projects/: the checkout, or the installed package
DEFAULT_CONFIG = REPO / "projects" / "uvla" / "pretrain.yaml"


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data")
    group.add_argument(
        "--world",
        type=Path,
        help="a toy world folder (world.json): sets --entities, --features and --class-names",
    )
    group.add_argument(
        "--entities",
        type=Path,
        help="Flickr30K Entities root (Sentences/, Annotations/, <split>.txt)",
    )
    group.add_argument(
        "--features", type=Path, help="MMF feature LMDB or npy folder holding the images' regions"
    )
    group.add_argument(
        "--class-names",
        type=Path,
        help="detector class names by id (vocabulary.json or one name a line)",
    )
    group.add_argument("--split", default="val", choices=SPLITS + ("all",))
    group.add_argument("--max-images", type=int, default=None, help="first N images of the split")
    group.add_argument(
        "--max-regions",
        type=int,
        default=None,
        help="keep each image's first N regions (MMF's max_features)",
    )
    group.add_argument("--max-length", type=int, default=64, help="text length in word-pieces")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="SPEC: 'base' (uvla, BERT init), a uvla state dict (uvla_final.pth) "
        "or an MMF checkpoint (.ckpt of uvla or visual_bert); repeatable",
    )
    group.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="yaml whose model_config.uvla builds 'base' and state-dict models",
    )
    group.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. model_config.uvla.bert_layers=2; repeatable",
    )
    group.add_argument(
        "--tokenizer",
        default=os.environ.get("UVLP_BERT"),
        help="local BERT folder whose WordPiece vocabulary the models use (default $UVLP_BERT)",
    )
    add_trust_argument(group)
    group.add_argument("--seed", type=int, default=0, help="seeds Base's new modules, t-SNE")
    group.add_argument("--batch-size", type=int, default=16)


def add_trust_argument(parser: Any) -> None:
    """``--trust-checkpoint`` on ``parser`` (an ArgumentParser or one of its groups)."""
    parser.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="also load legacy checkpoints holding objects other than tensors "
        "and plain data (torch.load weights_only=False: such a file can "
        "run code; only for files from a source you trust)",
    )


def parse_pool_probe_args(
    description: str, argv: list[str] | None, *, max_length_help: str, seed_help: str
) -> tuple[argparse.Namespace, list[tuple[str, str]]]:
    """The command line of the probes over the pre-training pool's held-out images
    (``uvlp-probe-visual-reliance``, ``uvlp-probe-mrc-shortcut``): the arguments and
    the ``--model`` (name, checkpoint) pairs, at least one."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--world",
        type=Path,
        required=True,
        help="a toy world (text/captions_gt.tsv, features/cc.lmdb, vocabulary.json)",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=CHECKPOINT",
        help="a uvla pre-training uvla_final.pth or MMF .ckpt; repeatable",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="yaml whose model_config.uvla builds the models",
    )
    parser.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. model_config.uvla.bert_layers=2; repeatable",
    )
    parser.add_argument(
        "--tokenizer",
        default=os.environ.get("UVLP_BERT"),
        help="local BERT folder (default $UVLP_BERT)",
    )
    add_trust_argument(parser)
    parser.add_argument(
        "--holdout-every",
        type=int,
        default=50,
        help="the pre-training hold-out rule (dataset_config.*.holdout_every)",
    )
    parser.add_argument("--max-regions", type=int, default=24)
    parser.add_argument("--max-length", type=int, default=24, help=max_length_help)
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument("--out", type=Path, help="write the results as json")
    args = parser.parse_args(argv)
    models = parse_model_args(args.model)
    if not models:
        parser.error("give at least one --model NAME=CHECKPOINT")
    return args, models


def load_pool(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[str], RegionStore]:
    """The pool of ``--world``: its (image id, caption) rows, class names and regions."""
    from mmf_uvlp.analysis.visual_reliance import pool_paths
    from mmf_uvlp.data_formats.text import read_captions

    captions, features = pool_paths(args.world)
    names = read_class_names(args.world / "vocabulary.json")
    return list(read_captions(captions)), names, RegionStore(features, names, args.max_regions)


@dataclass
class Data:
    """The entity annotations, the regions and what was read."""

    entities: Flickr30kEntities
    store: RegionStore
    image_ids: list[str]
    description: dict = field(default_factory=dict)


def _world_paths(world: Path) -> tuple[Path, Path, Path]:
    manifest_path = world / "world.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"--world {world}: no world.json (make toy-world writes one)")
    paths = json.loads(manifest_path.read_text(encoding="utf-8"))["paths"]
    if "flickr30k_entities" not in paths:
        raise ValueError(
            f"{manifest_path}: no flickr30k_entities; the world predates the "
            "Flickr30K Entities annotations: regenerate it (uvlp-make-toy-world "
            "--overwrite)"
        )
    pool = paths["pools"]["flickr30k"]
    features = pool.get("lmdb") or pool.get("npy_dir")
    if features is None:
        raise ValueError(f"{manifest_path}: the flickr30k pool has no features (--no-features)")
    return (
        world / paths["flickr30k_entities"]["root"],
        world / features,
        world / paths["vocabulary"],
    )


def load_data(args: argparse.Namespace) -> Data:
    """The annotations and regions named by ``--world`` or ``--entities`` / ``--features``."""
    entities_root, features, class_names = args.entities, args.features, args.class_names
    if args.world is not None:
        world_entities, world_features, vocabulary = _world_paths(args.world)
        entities_root = entities_root or world_entities
        features = features or world_features
        class_names = class_names or vocabulary
    if entities_root is None or features is None:
        raise SystemExit("give --world DIR, or --entities ROOT and --features PATH")
    names = read_class_names(class_names) if class_names else None
    entities = Flickr30kEntities(entities_root)
    split = None if args.split == "all" else args.split
    image_ids = entities.image_ids(split)[: args.max_images]
    store = RegionStore(features, names, args.max_regions)
    description = {
        "entities": str(entities_root),
        "features": str(features),
        "split": split,
        "images": len(image_ids),
    }
    return Data(entities, store, image_ids, description)


def load_tokenizer(args: argparse.Namespace):
    from transformers import BertTokenizerFast

    if not args.tokenizer:
        raise SystemExit("--tokenizer: set it, or $UVLP_BERT, to a local BERT folder")
    return BertTokenizerFast.from_pretrained(args.tokenizer)


def load_examples(data: Data, args: argparse.Namespace) -> tuple[list[Example], dict]:
    """Every caption of the chosen images as an example; also what was skipped."""
    from mmf_uvlp.corpus.noun_phrases import load_spacy

    builder = ExampleBuilder(load_tokenizer(args), load_spacy(), args.max_length)
    examples = list(builder.examples(data.entities.image(i) for i in data.image_ids))
    data.description["captions"] = len(examples)
    return examples, dict(builder.skipped)


def load_systems(args: argparse.Namespace, feature_dim: int) -> list[System]:
    """The ``--model`` systems, in order; a damaged or refused checkpoint ends the tool
    with one line naming the file."""
    pairs = parse_model_args(args.model)
    if not pairs:
        raise SystemExit("give at least one --model NAME=SPEC (e.g. --model Base=base)")
    config = uvla_config(args.config, args.opt)
    try:
        return [
            load_system(name, spec, config, feature_dim, args.seed, args.trust_checkpoint)
            for name, spec in pairs
        ]
    except FormatError as error:
        raise SystemExit(f"error: {error}") from None
