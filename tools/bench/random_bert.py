"""A BERT folder with random weights from a weights-free description (config.json and the
tokenizer's files), for timing on a machine the weights cannot reach: a step's time does not
depend on the weights' values.

    python tools/bench/random_bert.py --description gpu_carry/bert --out DIR [--seed 0]

The weights are BERT's own initialisation (``BertModel(config)``) under ``torch.manual_seed``;
the folder is written by ``save_pretrained`` beside copies of the tokenizer's files.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
)


def make_random_bert(description: Path, out: Path, seed: int = 0) -> Path:
    """Writes a randomly initialised BertModel described by ``description`` into ``out``."""
    from transformers import BertConfig, BertModel

    config_path = description / "config.json"
    if not config_path.is_file():
        raise SystemExit(f"random_bert: {config_path} is missing (the model's settings)")
    try:
        settings = json.loads(config_path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise SystemExit(f"random_bert: {config_path} is not valid JSON ({e})")
    if settings.get("model_type") != "bert":
        raise SystemExit(
            f"random_bert: {config_path}: model_type is "
            f"{settings.get('model_type')!r}, expected 'bert'"
        )
    if not (description / "vocab.txt").is_file():
        raise SystemExit(f"random_bert: {description / 'vocab.txt'} is missing (the vocabulary)")
    config = BertConfig.from_pretrained(str(description))
    torch.manual_seed(seed)
    model = BertModel(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    for name in TOKENIZER_FILES:
        if (description / name).is_file():
            shutil.copy2(description / name, out / name)
    logger.info(
        "random_bert: %s (%d parameters, seed %d)",
        out,
        sum(p.numel() for p in model.parameters()),
        seed,
    )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--description",
        type=Path,
        required=True,
        help="folder with config.json and vocab.txt (no weights)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the BERT folder to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    make_random_bert(args.description, args.out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
