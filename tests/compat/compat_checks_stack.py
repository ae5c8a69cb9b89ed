"""Checks of the fixes that let MMF rc10 run on the current stack (collections, demjson,
transformers, torchvision, torchtext, OmegaConf) and read its configs and models."""

from __future__ import annotations

import collections
import types
from typing import Any

from compat_checks_common import _configuration, check


@check("collections_abc_aliases")
def _collections() -> None:
    from mmf.utils.logger import Logger

    fake = types.SimpleNamespace(_is_master=False, write=lambda info: None)
    Logger.log_progress(fake, {"progress": "1/1"})
    assert collections.Mapping is collections.abc.Mapping


@check("demjson_alias")
def _demjson() -> None:
    from mmf.utils.configuration import Configuration

    config = Configuration._build_demjson_config(None, "{a: 1, b: [2, 3]}")
    assert config.a == 1 and list(config.b) == [2, 3]


@check("transformers_2x_module_paths")
def _transformers() -> None:
    import mmf.models.visual_bert  # noqa: F401  (the first ``import mmf`` adds the aliases)
    from transformers.modeling_bert import BertLayerNorm
    from transformers.optimization import AdamW

    import torch

    assert BertLayerNorm is torch.nn.LayerNorm
    parameter = torch.nn.Parameter(torch.ones(2))
    optimizer = AdamW([parameter], lr=0.1)
    assert optimizer.defaults["weight_decay"] == 0.0 and optimizer.defaults["eps"] == 1e-6


@check("torchvision_without_compiled_ops")
def _torchvision() -> None:
    from torchvision import transforms

    import mmf.datasets.processors.image_processors  # noqa: F401
    import torch

    assert transforms.Normalize([0.5], [0.5])(torch.ones(1, 2, 2)).sum() == 4


@check("torchtext_stub")
def _torchtext() -> None:
    import mmf.utils.vocab as vocab

    try:
        vocab.vocab.GloVe
    except ImportError as error:
        assert "torchtext" in str(error)
    else:
        raise AssertionError("torchtext's GloVe should be reported as unavailable")


@check("omegaconf_2_0_semantics")
def _omegaconf() -> None:
    import os

    from omegaconf import OmegaConf

    _configuration(["model=visual_bert", "dataset=vqa2"])
    config = OmegaConf.create({"present": 1})
    assert config.missing is None and config["missing"] is None
    assert "present: 1" in config.pretty()
    os.environ["MMF_UVLP_CHECK_VAR"] = "from-env"
    env = OmegaConf.create({"a": "${env:MMF_UVLP_CHECK_VAR,x}", "b": "${env:MMF_UVLP_UNSET, d}"})
    assert env.a == "from-env" and env.b == "d"


@check("model_and_datasets_from_config_file")
def _model_from_file() -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write("model: visual_bert\ndatasets: vqa2,nlvr2\n")
        handle.flush()
        config = _configuration([f"config={handle.name}"]).get_config()
        assert config.model == "visual_bert" and config.datasets == "vqa2,nlvr2"
        assert "visual_bert" in config.model_config and "nlvr2" in config.dataset_config
        overridden = _configuration([f"config={handle.name}", "model=vilbert"]).get_config()
        assert overridden.model == "vilbert" and "vilbert" in overridden.model_config
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write("model: visual_bert\ndataset: nlvr2\n")
        handle.flush()
        config = _configuration([f"config={handle.name}"]).get_config()
        assert config.datasets == "nlvr2" and "nlvr2" in config.dataset_config


@check("rc10_default_config_keys")
def _default_keys() -> None:
    config = _configuration(["model=visual_bert", "dataset=vqa2"]).get_config()
    assert config.training.stdout_capture is False
    assert config.training.detect_anomaly is False


def _tiny_visual_bert(**overrides: Any) -> Any:
    from omegaconf import OmegaConf

    from mmf.models.visual_bert import VisualBERT

    _configuration(["model=visual_bert", "dataset=vqa2"])
    config = OmegaConf.create(
        {
            "model": "visual_bert",
            "bert_model_name": None,
            "training_head_type": "classification",
            "num_labels": 3,
            "visual_embedding_dim": 8,
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "vocab_size": 50,
            "special_visual_initialize": True,
            "embedding_strategy": "plain",
            "bypass_transformer": False,
            "output_attentions": False,
            "output_hidden_states": False,
            "random_initialize": True,
            "freeze_base": False,
            "finetune_lr_multiplier": 1,
            "hidden_dropout_prob": 0.1,
            "losses": [],
        }
    )
    config.merge_with(overrides)
    model = VisualBERT(config)
    model.build()
    model.init_losses()
    return model


def _visual_bert_batch(max_features: int, dataset_type: str, **fields: Any) -> Any:
    """Two VQA2 samples for the tiny VisualBERT: text [1, 2, 3, PAD], 5 regions of which the
    first ``max_features`` count, and ``fields`` (tensors) on each."""
    import torch

    from mmf.common.sample import Sample, SampleList

    samples = []
    for _ in range(2):
        sample = Sample()
        sample.input_ids = torch.tensor([1, 2, 3, 0])
        sample.input_mask = torch.tensor([1, 1, 1, 0])
        sample.segment_ids = torch.zeros(4, dtype=torch.long)
        sample.image_feature_0 = torch.randn(5, 8)
        sample.image_info_0 = {"max_features": torch.tensor(max_features)}
        for name, value in fields.items():
            setattr(sample, name, value.clone())
        samples.append(sample)
    batch = SampleList(samples)
    batch.dataset_name, batch.dataset_type = "vqa2", dataset_type
    return batch


@check("hard_coded_cuda")
def _cuda() -> None:
    import torch

    batch = _visual_bert_batch(5, "train", targets=torch.zeros(3))
    output = _tiny_visual_bert()(batch)
    assert output["scores"].shape == (2, 3)


@check("visual_bert_output_attentions")
def _visual_bert_attentions() -> None:
    import torch

    for head in ("classification", "pretraining"):
        # pretraining: one masked word
        batch = _visual_bert_batch(3, "val", lm_label_ids=torch.tensor([-1, 5, -1, -1]))
        model = _tiny_visual_bert(
            training_head_type=head, num_hidden_layers=2, output_attentions=True
        ).eval()
        with torch.no_grad():
            output = model.forward(batch)
        (maps,) = output["attention_weights"]
        assert len(maps) == 2 and maps[0].shape == (2, 2, 9, 9), [m.shape for m in maps]
        torch.testing.assert_close(maps[1].sum(-1), torch.ones(2, 2, 9))
        assert float(maps[1][..., [3, 7, 8]].max()) < 1e-6  # padding text and regions


@check("dataset_imdb_attribute")
def _imdb() -> None:
    from mmf.datasets.builders.nlvr2.dataset import NLVR2Dataset

    fake = types.SimpleNamespace(annotation_db=["record"])
    assert NLVR2Dataset.imdb.fget(fake) == ["record"]


@check("nlvr2_ve_predictions")
def _nlvr2_ve_predictions() -> None:
    import torch
    from mmf.common.report import Report
    from mmf.common.sample import SampleList
    from mmf.datasets.builders.nlvr2.dataset import NLVR2Dataset
    from mmf.datasets.builders.visual_entailment.dataset import VisualEntailmentDataset

    scores = torch.tensor([[0.9, 0.1, 0.0], [0.1, 0.2, 0.7]])
    for dataset_class, records, expected in (
        (
            NLVR2Dataset,
            [{"identifier": "dev-7-0-0"}, {"identifier": "dev-7-1-0"}],
            [
                {"identifier": "dev-7-1-0", "prediction": "False"},
                {"identifier": "dev-7-0-0", "prediction": "True"},
            ],
        ),
        (
            VisualEntailmentDataset,
            [{"pairID": "1.jpg#0r1e"}, {"pairID": "1.jpg#0r2c"}],
            [
                {"pairID": "1.jpg#0r2c", "prediction": "entailment"},
                {"pairID": "1.jpg#0r1e", "prediction": "contradiction"},
            ],
        ),
    ):
        dataset = dataset_class.__new__(dataset_class)
        dataset.annotation_db, dataset.dataset_name = records, "fake"
        width = 2 if dataset_class is NLVR2Dataset else 3
        report = Report(SampleList({"id": torch.tensor([1, 0])}), {"scores": scores[:, :width]})
        assert dataset.format_for_prediction(report) == expected
