"""A random tiny uvla checkpoint and the arguments that point a pool probe
(``uvlp-probe-*``) at it on the tiny world."""

from pathlib import Path
from typing import List, Sequence, Tuple

import torch
from omegaconf import OmegaConf

from mmf_uvlp.analysis.systems import uvla_config
from mmf_uvlp.models.uvla import UVLA

from helpers import REPO

TINY = str(REPO / "configs" / "models" / "uvla" / "tiny_random.yaml")


def tiny_probe_run(world: Path, out: Path, heads: Sequence[str]) -> Tuple[UVLA, List[str]]:
    """A tiny random uvla with ``heads`` (seed 0), saved as ``out/uvla_final.pth``, and the
    probe arguments that read ``world`` with it (held out: every 6th image)."""
    config = OmegaConf.merge(
        uvla_config(TINY),
        {"feature_dim": 64, "heads": list(heads), "losses": [], "curriculum": {"enabled": False}},
    )
    torch.manual_seed(0)
    model = UVLA(config)
    model.build()
    torch.save(model.state_dict(), out / "uvla_final.pth")
    args = [
        "--world",
        str(world),
        "--config",
        TINY,
        "--opt",
        "model_config.uvla.feature_dim=64",
        "--holdout-every",
        "6",
    ]
    return model, args
