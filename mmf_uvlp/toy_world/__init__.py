"""A generated "toy world" in the real on-disk formats (VinVL tsv, MMF LMDB/npy, refer).

Images are scenes of objects with attributes and relations; a simulated detector turns
them into regions with labels, confidences and features built from class and attribute
prototypes. Captions, narrative corpora and the four downstream sets (VQA2, NLVR2,
SNLI-VE, RefCOCO+) are written next to them, described by ``world.json``.
This package never imports MMF.
"""

from mmf_uvlp.toy_world.config import PRESETS, WorldConfig
from mmf_uvlp.toy_world.generate import generate_world

__all__ = ["PRESETS", "WorldConfig", "generate_world"]
