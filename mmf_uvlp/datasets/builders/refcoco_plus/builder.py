"""MMF builders of RefCOCO+: ``refcoco_plus`` and three evaluation views.

``refcoco_plus`` trains on the refer split train, validates on val and tests on testA +
testB together. The paper reports val, testA and testB separately; MMF names a test
result after its data set (``test/<dataset>/<metric>``), so each of them is a data set
of its own, a view of the same data whose ``test`` type reads one refer split:
``refcoco_plus_val``, ``refcoco_plus_testA`` and ``refcoco_plus_testB``. One inference
run reports all three::

    mmf_run config=<project config> model=uvla run_type=inference \\
        datasets=refcoco_plus_val,refcoco_plus_testA,refcoco_plus_testB \\
        checkpoint.resume_file=<save dir>/best.ckpt

The split of each dataset type is ``dataset_config.<name>.refer_splits`` in
``configs/datasets/refcoco_plus/defaults.yaml`` (which holds all four entries).
"""

from __future__ import annotations

import functools
from typing import Any

from mmf.common.registry import registry
from mmf.datasets.mmf_dataset_builder import MMFDatasetBuilder

from mmf_uvlp.datasets.builders.refcoco_plus.dataset import RefCOCOPlusDataset
from mmf_uvlp.utils.config_files import default_config


@registry.register_builder("refcoco_plus")
class RefCOCOPlusBuilder(MMFDatasetBuilder):
    """RefCOCO+ (refer layout) with MMF features of the detected proposals."""

    def __init__(self, dataset_name: str = "refcoco_plus", *args: Any, **kwargs: Any):
        dataset_class = functools.partial(RefCOCOPlusDataset, dataset_name=dataset_name)
        super().__init__(dataset_name, dataset_class, *args, **kwargs)

    @classmethod
    def config_path(cls) -> str:
        return default_config("datasets", "refcoco_plus", "defaults.yaml")

    def update_registry_for_model(self, config: Any) -> None:
        """Nothing to register: rc10's ``build_dataset`` calls this on every builder, and
        the models read their sizes from their own config."""


@registry.register_builder("refcoco_plus_val")
class RefCOCOPlusValBuilder(RefCOCOPlusBuilder):
    """RefCOCO+ whose ``test`` type reads the refer split val."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__("refcoco_plus_val", *args, **kwargs)


@registry.register_builder("refcoco_plus_testA")
class RefCOCOPlusTestABuilder(RefCOCOPlusBuilder):
    """RefCOCO+ whose ``test`` type reads the refer split testA (people)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__("refcoco_plus_testA", *args, **kwargs)


@registry.register_builder("refcoco_plus_testB")
class RefCOCOPlusTestBBuilder(RefCOCOPlusBuilder):
    """RefCOCO+ whose ``test`` type reads the refer split testB (other objects)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__("refcoco_plus_testB", *args, **kwargs)
