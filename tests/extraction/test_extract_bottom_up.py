"""The Visual Genome bottom-up-attention detector in detectron2's registries: the public
files' key names and shapes (their manifests), loading them, and its layers against
hand-written references."""

import math
import pickle

import numpy as np
import pytest

from helpers.extraction import NO_DETECTRON2

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from detectron2.modeling import build_model  # noqa: E402
from helpers.checkpoints import (  # noqa: E402
    ANCHORS,
    BOTTOM_UP,
    BOTTOM_UP_ATTR,
    cell_anchors,
    manifest,
    public_checkpoint,
)

from mmf_uvlp.extraction.checkpoints import load_weights  # noqa: E402
from mmf_uvlp.extraction.detector import build_config  # noqa: E402
from mmf_uvlp.extraction.selection import Selection  # noqa: E402


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = build_config("VG-R101-C4-attr", Selection())
    cfg.MODEL.DEVICE = "cpu"
    return build_model(cfg).eval()


@pytest.mark.parametrize(
    "arch, name", [("VG-R101-C4-attr", BOTTOM_UP_ATTR), ("VG-R101-C4", BOTTOM_UP)]
)
def test_the_architecture_has_the_public_file_s_names_and_shapes(arch, name):
    """Against the manifest of the public file (its names read from py-bottom-up-attention's
    modules, not from this project); its anchors are the detector's, computed."""
    cfg = build_config(arch, Selection())
    cfg.MODEL.DEVICE = "cpu"
    model = build_model(cfg)
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    anchors = "proposal_generator.anchor_generator.cell_anchors.0"
    assert np.allclose(
        dict(model.named_buffers())[anchors].numpy(), cell_anchors(*ANCHORS[name]), atol=1e-4
    )
    have[anchors] = (12, 4)
    want = {k: shape for k, (shape, _) in manifest(name).items()}
    assert sorted(set(have) ^ set(want)) == []
    assert {k: have[k] for k in want if have[k] != want[k]} == {}


def test_a_pkl_of_the_public_layout_loads_every_tensor(model, tmp_path):
    path = public_checkpoint(BOTTOM_UP_ATTR, tmp_path / "faster_rcnn_from_caffe_attr.pkl")
    report = load_weights(model, str(path))
    assert report.whole and report.loaded == len(manifest(BOTTOM_UP_ATTR)) == 536
    with open(path, "rb") as handle:
        blobs = pickle.load(handle)["model"]
    state = model.state_dict()
    assert all(np.array_equal(state[k].numpy(), v) for k, v in blobs.items() if k in state)


def _bn(x, norm):
    scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
    shift = norm.bias - norm.running_mean * scale
    return x * scale[None, :, None, None] + shift[None, :, None, None]


def _randomise(module, seed):
    generator = torch.Generator().manual_seed(seed)
    for name, tensor in list(module.state_dict().items()):
        values = torch.rand(tensor.shape, generator=generator) * 0.2 + (
            0.5 if "running_var" in name else -0.1
        )
        tensor.copy_(values)


def test_the_stem_is_caffe_s_unpadded_rounded_up_max_pool(model):
    stem = model.backbone.stem
    _randomise(stem, 1)
    x = torch.rand(1, 3, 20, 18, generator=torch.Generator().manual_seed(2))
    y = F.relu(_bn(F.conv2d(x, stem.conv1.weight, stride=2, padding=3), stem.conv1.norm))
    h, w = y.shape[2:]
    out_h, out_w = math.ceil((h - 3) / 2) + 1, math.ceil((w - 3) / 2) + 1
    ref = torch.empty(1, 64, out_h, out_w)
    for i in range(out_h):
        for j in range(out_w):
            ref[0, :, i, j] = y[0, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].amax(dim=(1, 2))
    assert torch.allclose(stem(x), ref, atol=1e-5)
    # a 10 x 9 map: rounding down would give 4 x 4, detectron2's padded pool 5 x 5
    assert stem(x).shape[2:] == (5, 4)


def _dilated(weight):
    """A 3x3 kernel spread over 5x5 with zeros between its taps: dilation 2 by hand."""
    out = torch.zeros(*weight.shape[:2], 5, 5)
    out[:, :, ::2, ::2] = weight
    return out


def test_res5_keeps_stride_1_and_dilates_its_3x3_convolutions(model):
    block = model.roi_heads.res5[0]
    _randomise(block, 3)
    x = torch.rand(2, 1024, 7, 7, generator=torch.Generator().manual_seed(4))
    y = F.relu(_bn(F.conv2d(x, block.conv1.weight), block.conv1.norm))
    y = F.relu(_bn(F.conv2d(y, _dilated(block.conv2.weight), padding=2), block.conv2.norm))
    y = _bn(F.conv2d(y, block.conv3.weight), block.conv3.norm)
    shortcut = _bn(F.conv2d(x, block.shortcut.weight), block.shortcut.norm)
    ref = F.relu(y + shortcut)
    got = block(x)
    assert got.shape == (2, 2048, 7, 7)
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert all(b.conv2.dilation == (2, 2) for b in model.roi_heads.res5)


def test_the_pooler_is_roi_pool_at_14_by_14(model):
    pooler = model.roi_heads.pooler
    feature = torch.rand(1, 3, 20, 24, generator=torch.Generator().manual_seed(5))
    from detectron2.structures import Boxes

    box = [17.0, 30.0, 250.0, 190.0]  # pixels; the feature map is 1/16
    got = pooler([feature], [Boxes(torch.tensor([box]))])[0]
    x1, y1, x2, y2 = (round(v / 16) for v in box)
    roi_w, roi_h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
    ref = torch.zeros(3, 14, 14)
    for i in range(14):
        for j in range(14):
            h0 = min(max(math.floor(i * roi_h / 14) + y1, 0), 20)
            h1 = min(max(math.ceil((i + 1) * roi_h / 14) + y1, 0), 20)
            w0 = min(max(math.floor(j * roi_w / 14) + x1, 0), 24)
            w1 = min(max(math.ceil((j + 1) * roi_w / 14) + x1, 0), 24)
            if h1 > h0 and w1 > w0:
                ref[:, i, j] = feature[0, :, h0:h1, w0:w1].amax(dim=(1, 2))
    assert torch.equal(got, ref)


def test_the_attribute_head_reads_the_feature_and_the_best_class_logit(model):
    """py-bottom-up-attention's FastRCNNOutputLayers: the embedding of the argmax over all
    1,601 class logits (background, the last, included); its demo and MMF's port drop the
    LAST attribute column ("no attribute") before the softmax."""
    head = model.roi_heads.box_predictor
    _randomise(head, 6)
    x = torch.rand(3, 2048, generator=torch.Generator().manual_seed(7))
    logits = torch.zeros(3, 1601)
    logits[0, 0], logits[1, 5], logits[2, 1600] = 1.0, 2.0, 3.0  # the last: background
    rows = torch.tensor([0, 5, 1600])
    hidden = torch.relu(
        torch.cat([x, head.cls_embedding.weight[rows]], 1) @ head.fc_attr.weight.T
        + head.fc_attr.bias
    )
    ref = hidden @ head.attr_score.weight.T + head.attr_score.bias
    assert ref.shape == (3, 401)
    assert torch.allclose(head.attribute_logits(x, logits), ref, atol=1e-4)
    probs = torch.exp(ref[:, :400]) / torch.exp(ref[:, :400]).sum(1, keepdim=True)
    assert torch.allclose(head.attribute_probs(x, logits), probs, atol=1e-6)
