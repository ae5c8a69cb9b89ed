"""Checks of the fixes of MMF's ViLBERT: variable region counts, NLVR2 pairs, random initialisation."""

from __future__ import annotations

from typing import Any

from compat_checks_common import _configuration, check


def _tiny_vilbert(head: str, **overrides: Any) -> Any:
    """A randomly initialised two-stream ViLBERT (bert_model_name: null) in eval mode."""
    import torch

    from mmf.models.vilbert import ViLBERT
    from mmf.utils.configuration import load_yaml

    _configuration(["model=vilbert", "dataset=nlvr2"])
    config = load_yaml("configs/models/vilbert/defaults.yaml").model_config.vilbert
    config.merge_with(
        dict(
            bert_model_name=None,
            training_head_type=head,
            num_labels=2,
            losses=[],
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            v_feature_size=8,
            v_target_size=5,
            v_hidden_size=16,
            v_num_hidden_layers=1,
            v_num_attention_heads=2,
            v_intermediate_size=32,
            bi_hidden_size=16,
            bi_num_attention_heads=2,
            bi_intermediate_size=32,
            v_biattention_id=[0],
            t_biattention_id=[0],
            **overrides,
        )
    )
    torch.manual_seed(0)
    model = ViLBERT(config)
    model.build()
    model.init_losses()
    return model.eval()


def _vilbert_image(regions: int, rows: int = 4) -> Any:
    """One image of ``regions`` detections, features padded to ``rows`` as MMF's reader does."""
    import numpy as np
    import torch

    from mmf.common.sample import Sample

    image = Sample()
    image.image_feature_0 = torch.zeros(rows, 8)
    image.image_feature_0[:regions] = torch.randn(regions, 8)
    boxes = np.tile(np.array([[1.0, 2.0, 6.0, 9.0]], dtype=np.float32), (regions, 1))
    image.image_info_0 = {
        "max_features": torch.tensor(regions),
        "bbox": boxes,
        "image_width": 10,
        "image_height": 10,
        "cls_prob": np.full((regions, 5), 0.2, dtype=np.float32),
    }
    return image


def _vilbert_text(sample: Any) -> Any:
    import torch

    sample.input_ids = torch.tensor([1, 7, 8, 2, 0])
    sample.input_mask = torch.tensor([1, 1, 1, 1, 0])
    sample.segment_ids = torch.zeros(5, dtype=torch.long)
    sample.lm_label_ids = torch.tensor([-1, 7, -1, -1, -1])
    return sample


@check("vilbert_variable_region_counts")
def _vilbert_region_counts() -> None:
    import torch

    from mmf.common.sample import SampleList

    samples = []
    for regions in (4, 2, 6):  # the third image has more boxes than feature rows
        sample = _vilbert_text(_vilbert_image(min(regions, 4)))
        if regions > 4:
            sample.image_info_0["bbox"] = torch.ones(regions, 4).numpy()
            sample.image_info_0["cls_prob"] = torch.full((regions, 5), 0.2).numpy()
        sample.image_labels = [1, -1, 1, -1]
        samples.append(sample)
    batch = SampleList(samples)
    batch.dataset_name, batch.dataset_type = "masked_coco", "train"
    output = _tiny_vilbert("pretraining")(batch)
    losses = output["losses"]
    assert set(losses) == {"masked_coco/train/masked_lm_loss", "masked_coco/train/masked_img_loss"}
    assert all(torch.isfinite(value).all() for value in losses.values()), losses


@check("vilbert_nlvr2_pairs")
def _vilbert_nlvr2() -> None:
    import torch

    from mmf.common.sample import Sample, SampleList

    torch.manual_seed(1)
    examples = []
    for _ in range(3):
        example = _vilbert_text(Sample())
        example.img0, example.img1 = _vilbert_image(4), _vilbert_image(4)
        example.targets = torch.tensor(0)
        examples.append(example)
    model = _tiny_vilbert("nlvr2")

    def scores() -> torch.Tensor:
        batch = SampleList(examples)
        batch.dataset_name, batch.dataset_type = "nlvr2", "val"
        with torch.no_grad():
            return model(batch)["scores"]

    before = scores()
    examples[1].img1.image_feature_0[:4] = torch.randn(4, 8) * 3  # example 1's second image
    changed = (scores() - before).abs().sum(-1) > 1e-6
    assert changed.tolist() == [False, True, False], f"rows whose score changed: {changed.tolist()}"


@check("vilbert_random_init")
def _vilbert_random() -> None:
    model = _tiny_vilbert("classification")
    embeddings = model.model.bert.embeddings.word_embeddings
    assert embeddings.num_embeddings == 50 and float(embeddings.weight.std()) > 0
