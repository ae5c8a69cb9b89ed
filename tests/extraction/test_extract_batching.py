"""A batch gives each image what the image gives alone (float32 on the CPU), whatever the
sizes in it; the precision a run computes in."""

import numpy as np
import pytest

from helpers.extraction import NO_DETECTRON2

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

import torch  # noqa: E402

from mmf_uvlp.extraction.detector import Detector, build_config  # noqa: E402
from mmf_uvlp.extraction.selection import Selection  # noqa: E402

SELECTION = Selection(proposals=40, min_boxes=6, max_boxes=6)
SMALL = ["INPUT.MIN_SIZE_TEST", "256", "INPUT.MAX_SIZE_TEST", "400"]


def detector(precision="auto"):
    """R50-C4 with random weights, its frozen norms given biases as trained ones have: a
    padded border then no longer stays zero through the network."""
    from detectron2.layers import FrozenBatchNorm2d

    model = Detector(
        build_config("R50-C4", SELECTION, SMALL),
        None,
        SELECTION,
        "cpu",
        random_seed=0,
        precision=precision,
    )
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.model.modules():
            if isinstance(module, FrozenBatchNorm2d):
                module.bias.copy_(1.0 * torch.randn(module.bias.shape, generator=generator))
    return model


@pytest.fixture(scope="module")
def photos():
    """Three sizes once resized (256x256 twice, 256x384, 256x385): a batch pads them."""
    from skimage import data

    camera = np.repeat(data.camera()[:, :, None], 3, axis=2)
    return [data.astronaut(), data.coffee(), data.chelsea(), camera]


def test_a_batch_gives_each_image_what_it_gives_alone(photos):
    torch.set_num_threads(1)
    model = detector()
    together = model(photos)
    for image, batched in zip(photos, together):
        (alone,) = model([image])
        np.testing.assert_array_equal(batched.classes, alone.classes)
        np.testing.assert_allclose(batched.boxes, alone.boxes, rtol=0, atol=1e-3)
        np.testing.assert_allclose(batched.scores, alone.scores, rtol=0, atol=1e-5)
        np.testing.assert_allclose(batched.features, alone.features, rtol=1e-4, atol=1e-5)


def test_auto_precision_is_fp32_on_a_cpu_and_half_types_need_cuda():
    assert detector().describe()["precision"] == "fp32"
    for half in ("fp16", "bf16"):
        with pytest.raises(
            ValueError, match=f"--precision {half}: mixed precision needs a CUDA device"
        ):
            detector(half)
