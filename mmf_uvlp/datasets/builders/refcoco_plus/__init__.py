"""RefCOCO+ (refer layout) for MMF: builders ``refcoco_plus`` and its evaluation views."""

from mmf_uvlp.datasets.builders.refcoco_plus.builder import (
    RefCOCOPlusBuilder,
    RefCOCOPlusTestABuilder,
    RefCOCOPlusTestBBuilder,
    RefCOCOPlusValBuilder,
)
from mmf_uvlp.datasets.builders.refcoco_plus.dataset import RefCOCOPlusDataset

__all__ = [
    "RefCOCOPlusBuilder",
    "RefCOCOPlusDataset",
    "RefCOCOPlusTestABuilder",
    "RefCOCOPlusTestBBuilder",
    "RefCOCOPlusValBuilder",
]
