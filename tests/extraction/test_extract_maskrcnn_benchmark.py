"""VinVL's X152-C4 and MMF's vmb X101-FPN on detectron2: the maskrcnn-benchmark names of their
public files (tests/fixtures/detector_checkpoints/), and the layers, boxes and attributes
against hand-written references of scene_graph_benchmark's and maskrcnn-benchmark's code."""

import numpy as np
import pytest

from helpers.extraction import NO_DETECTRON2

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from detectron2.config import get_cfg  # noqa: E402
from detectron2.modeling import build_model  # noqa: E402
from detectron2.structures import Boxes  # noqa: E402

from helpers.checkpoints import manifest, random_tensors  # noqa: E402
from mmf_uvlp.extraction import maskrcnn_benchmark as mb  # noqa: E402
from mmf_uvlp.extraction import vinvl, vmb  # noqa: E402


def _build(config):
    torch.manual_seed(0)
    cfg = config(get_cfg())
    cfg.MODEL.DEVICE = "cpu"
    return build_model(cfg).eval()


@pytest.fixture(scope="module")
def x152():
    return _build(vinvl.vinvl_config)


@pytest.mark.parametrize("name", ["vinvl_vg_x152c4", "mmf_vmb_X101_64x4d_FPN"])
def test_every_tensor_of_the_public_file_has_a_module_of_its_shape(name, request):
    model = request.getfixturevalue("x152") if name.startswith("vinvl") else _build(vmb.vmb_config)
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    public = manifest(name)
    names = {
        mb.new_name(k, "backbone.bottom_up." if "FPN" in name else "backbone."): s
        for k, (s, _) in public.items()
    }
    assert len(names) == len(public)  # no two public names meet
    assert sorted(set(have) ^ set(names)) == []
    assert {k: (have[k], s) for k, s in names.items() if have[k] != s} == {}


def test_the_background_rows_move_from_first_to_last():
    weight = torch.arange(3 * 2, dtype=torch.float32).view(3, 2)  # background, class 1, 2
    deltas = torch.arange(12 * 2, dtype=torch.float32).view(12, 2)
    out = mb.convert(
        {
            "roi_heads.box.predictor.cls_score.weight": weight,
            "roi_heads.box.predictor.cls_score.bias": torch.tensor([0.0, 1.0, 2.0]),
            "roi_heads.box.predictor.bbox_pred.weight": deltas,
        }
    )
    assert out["roi_heads.box_predictor.cls_score.weight"].tolist() == [[2, 3], [4, 5], [0, 1]]
    assert out["roi_heads.box_predictor.cls_score.bias"].tolist() == [1, 2, 0]
    rows = out["roi_heads.box_predictor.bbox_pred.weight"][:, 0].tolist()
    assert rows == [8, 10, 12, 14, 16, 18, 20, 22, 0, 2, 4, 6]


def _frozen_bn(x, prefix, state):
    """maskrcnn-benchmark's FrozenBatchNorm2d: no epsilon under the square root."""
    scale = state[f"{prefix}.weight"] / state[f"{prefix}.running_var"].sqrt()
    shift = state[f"{prefix}.bias"] - state[f"{prefix}.running_mean"] * scale
    return x * scale[None, :, None, None] + shift[None, :, None, None]


def _grouped_conv(x, weight, groups, stride=1, padding=0):
    """A grouped convolution as ``groups`` separate convolutions of channel slices."""
    xs, ws = x.chunk(groups, dim=1), weight.chunk(groups, dim=0)
    return torch.cat(
        [F.conv2d(a, w, stride=stride, padding=padding) for a, w in zip(xs, ws)], dim=1
    )


def _bottleneck(x, prefix, state, stride):
    """maskrcnn-benchmark's Bottleneck with STRIDE_IN_1X1 False: the stride in the 3x3."""
    y = F.relu(_frozen_bn(F.conv2d(x, state[f"{prefix}.conv1.weight"]), f"{prefix}.bn1", state))
    y = _grouped_conv(y, state[f"{prefix}.conv2.weight"], 32, stride=stride, padding=1)
    y = F.relu(_frozen_bn(y, f"{prefix}.bn2", state))
    y = _frozen_bn(F.conv2d(y, state[f"{prefix}.conv3.weight"]), f"{prefix}.bn3", state)
    shortcut = x
    if f"{prefix}.downsample.0.weight" in state:
        shortcut = F.conv2d(x, state[f"{prefix}.downsample.0.weight"], stride=stride)
        shortcut = _frozen_bn(shortcut, f"{prefix}.downsample.1", state)
    return F.relu(y + shortcut)


@pytest.fixture(scope="module")
def x152_state():
    layers = ("backbone.body.layer1.", "backbone.body.layer2.0.")
    public = {k: v for k, v in manifest("vinvl_vg_x152c4").items() if k.startswith(layers)}
    return {k: torch.from_numpy(v).double() for k, v in random_tensors(public, 1).items()}


@pytest.mark.parametrize(
    "layer, stage, stride, channels",
    [
        ("layer1.0", "res2", 1, 64),  # 32 groups x 8 wide, the shortcut a projection
        ("layer1.1", "res2", 1, 256),  # the identity shortcut
        ("layer2.0", "res3", 2, 256),  # 32 x 16, stride 2 in the grouped 3x3
    ],
)
def test_the_x152_bottleneck_equals_a_hand_written_one(
    x152, x152_state, layer, stage, stride, channels
):
    prefix = f"backbone.body.{layer}"
    state = {k: v for k, v in x152_state.items() if k.startswith(prefix + ".")}
    block = getattr(x152.backbone, stage)[int(layer.split(".")[1])]
    converted = mb.convert(state)
    inner = f"backbone.{stage}.{layer.split('.')[1]}."
    block.double().load_state_dict({k[len(inner) :]: v for k, v in converted.items()}, strict=True)
    x = torch.rand(
        2, channels, 9, 9, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    with torch.no_grad():
        got = block(x)
    ref = _bottleneck(x, prefix, state, stride)
    assert (
        got.shape
        == ref.shape
        == (2, 256 * 2 ** (stage == "res3"), 9 // stride + stride - 1, 9 // stride + stride - 1)
    )
    assert torch.allclose(got, ref, rtol=1e-9, atol=1e-9)
    block.float()


def test_the_legacy_decoder_is_maskrcnn_benchmark_s(x152):
    for model in (x152, _build(vmb.vmb_config)):
        assert isinstance(model.proposal_generator.box2box_transform, mb.LegacyBox2BoxTransform)
        assert isinstance(
            model.roi_heads.box_predictor.box2box_transform, mb.LegacyBox2BoxTransform
        )
    transform = mb.LegacyBox2BoxTransform((10.0, 10.0, 5.0, 5.0))
    box = torch.tensor([[10.0, 20.0, 29.0, 59.0]])  # 20 x 40 pixels with the +1
    deltas = torch.tensor([[1.0, -2.0, 5.0 * np.log(2.0), 0.0]])
    # centre (20, 40) moves by (0.1 * 20, -0.2 * 40); the width doubles to 40
    got = transform.apply_deltas(deltas, box)
    assert torch.allclose(got, torch.tensor([[2.0, 12.0, 41.0, 51.0]]), atol=1e-5)


def test_the_file_s_anchors_are_saved_loaded_and_used(x152):
    model = x152
    anchors = torch.tensor([[-8.0, -4.0, 7.0, 3.0]] * 15) + torch.arange(15.0)[:, None]
    key = "proposal_generator.anchor_generator.cell_anchors.0"
    model.load_state_dict({**model.state_dict(), key: anchors})
    grid = model.proposal_generator.anchor_generator([torch.zeros(1, 1024, 2, 3)])[0].tensor
    assert torch.equal(grid[:15], anchors)  # the first location's anchors, in the file's order
    assert torch.equal(grid[15:30], anchors + torch.tensor([16.0, 0.0, 16.0, 0.0]))


def _attribute_reference(pooled, labels, state, thresh=0.05, per_image=100, per_box=16):
    """scene_graph_benchmark's AttributeRCNNPredictor and AttributePostProcessor by hand."""
    emb = state["attribute.predictor.cls_embedding.weight"].numpy()[labels]
    x = np.concatenate([pooled, emb], axis=1)
    hidden = np.maximum(
        x @ state["attribute.predictor.fc_attr.weight"].numpy().T
        + state["attribute.predictor.fc_attr.bias"].numpy(),
        0,
    )
    logits = (
        hidden @ state["attribute.predictor.attr_score.weight"].numpy().T
        + state["attribute.predictor.attr_score.bias"].numpy()
    )
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    probs[:, 0] = 0
    count = int((probs > thresh).sum())
    probs[probs <= thresh] = 0
    if count > per_image:  # the k-th smallest of every score, zeros included
        probs[probs < np.sort(probs.ravel())[count - per_image]] = 0
    ids = np.argsort(-probs, axis=1, kind="stable")[:, :per_box]
    return ids, np.take_along_axis(probs, ids, axis=1)


def test_the_attribute_head_equals_scene_graph_benchmark_s_by_hand():
    rng = np.random.default_rng(4)
    classes, attributes, dim = 5, 7, 6
    state = {
        "attribute.predictor.cls_embedding.weight": rng.normal(size=(classes + 1, 4)),
        "attribute.predictor.fc_attr.weight": rng.normal(size=(8, dim + 4)),
        "attribute.predictor.fc_attr.bias": rng.normal(size=8),
        "attribute.predictor.attr_score.weight": rng.normal(size=(attributes + 1, 8)),
        "attribute.predictor.attr_score.bias": rng.normal(size=attributes + 1),
    }
    state = {k: torch.tensor(v, dtype=torch.float32) for k, v in state.items()}
    head = vinvl.VinVLAttributePredictor(dim, classes, attributes, embed_dim=4, fc_dim=8)
    prefix = "roi_heads.attribute_predictor."
    head.load_state_dict({k[len(prefix) :]: v for k, v in mb.convert(state).items()}, strict=True)
    pooled = rng.normal(size=(4, dim)).astype(np.float32)
    labels_1_based = np.array([1, 5, 3, 5])
    with torch.no_grad():
        logits = head(torch.from_numpy(pooled), torch.from_numpy(labels_1_based))
    capped = 0
    for thresh, per_image, per_box in ((0.05, 100, 3), (0.0, 5, 8), (0.05, 100, 8)):
        ids, scores = vinvl.select_attributes(logits, thresh, per_image, per_box)
        ref_ids, ref_scores = _attribute_reference(
            pooled, labels_1_based, state, thresh, per_image, per_box
        )
        capped += int((ref_scores == 0).sum()) if thresh == 0 else 0
        assert np.allclose(scores.numpy(), ref_scores, atol=1e-6)
        nonzero = ref_scores > 0
        assert nonzero.any() and (ids.numpy()[nonzero] == ref_ids[nonzero]).all()
    assert capped  # the per-image cap removed some at threshold 0
    assert (ids.numpy()[scores.numpy() > 0] > 0).all()  # row 0, "no attribute", never


def test_the_attribute_head_reads_vinvl_s_own_res5_on_the_kept_boxes(x152):
    heads = x152.roi_heads
    features = {"res4": torch.rand(1, 1024, 6, 8, generator=torch.Generator().manual_seed(5))}
    boxes = [Boxes(torch.tensor([[4.0, 8.0, 60.0, 90.0], [30.0, 2.0, 120.0, 50.0]]))]
    classes = torch.tensor([0, 1593])  # 0-based: the embedding's rows 1 and 1594
    with torch.no_grad():
        got = heads.attribute_logits(features, boxes, classes)
        pooled = heads.attribute_res5(heads.pooler([features["res4"]], boxes)).mean(dim=[2, 3])
        emb = heads.attribute_predictor.cls_embedding.weight[[1, 1594]]
        fc = heads.attribute_predictor.fc_attr
        hidden = torch.relu(torch.cat([pooled, emb], 1) @ fc.weight.T + fc.bias)
        score = heads.attribute_predictor.attr_score
        ref = hidden @ score.weight.T + score.bias
        other = heads.res5(heads.pooler([features["res4"]], boxes)).mean(dim=[2, 3])
    assert got.shape == (2, 525)
    assert torch.allclose(got, ref, atol=1e-4)
    assert not torch.allclose(pooled, other)  # its own res5, not the box head's
    assert heads.attribute_res5[0].conv2.stride == (2, 2)


def test_vinvl_boxes_are_the_best_class_surviving_nms_by_score():
    # three proposals, two foreground classes; boxes per (proposal, class)
    same = [0.0, 0.0, 10.0, 10.0]
    regressed = torch.tensor(
        [
            [same, [50.0, 50.0, 60.0, 60.0]],
            [[0.0, 0.0, 10.0, 9.0], [80.0, 80.0, 90.0, 90.0]],
            [[30.0, 30.0, 40.0, 40.0], [50.0, 50.0, 60.0, 61.0]],
        ]
    )
    probs = torch.tensor(
        [
            [0.60, 0.10],
            [0.50, 0.30],  # class 0 suppressed by proposal 0: class 1 it is
            [0.05, 0.09],
        ]
    )  # class 1 suppressed by proposal 0's class 1
    idx, labels, scores = vinvl.select_boxes(
        probs, regressed, conf_thresh=0.2, min_boxes=1, max_boxes=10
    )
    assert idx.tolist() == [0, 1] and labels.tolist() == [0, 1]
    assert np.allclose(scores.tolist(), [0.60, 0.30])
    # at least three: proposal 2 comes third with its surviving class 0
    idx, labels, scores = vinvl.select_boxes(
        probs, regressed, conf_thresh=0.2, min_boxes=3, max_boxes=10
    )
    assert idx.tolist() == [0, 1, 2] and labels.tolist() == [0, 1, 0]
    # by score, not by proposal: the higher-scoring later proposal first
    idx, _, _ = vinvl.select_boxes(probs[[1, 0, 2]], regressed[[1, 0, 2]], 0.2, 1, 1)
    assert idx.tolist() == [1]
    # maskrcnn-benchmark's IoU counts the far pixel: 11 x 11 boxes overlapping 11 x 10
    # have IoU 110 / 121 = 0.909 (0.9 without the +1): at 0.905 one is suppressed
    idx, _, _ = vinvl.select_boxes(probs[:2, :1], regressed[:2, :1], 0.0, 1, 10, nms_iou=0.905)
    assert idx.tolist() == [0]


def test_vmb_boxes_are_the_best_surviving_scores_and_always_max_boxes():
    boxes = torch.tensor(
        [
            [0.0, 0.0, 10.0, 10.0],
            [0.0, 0.0, 10.0, 9.0],
            [50.0, 50.0, 60.0, 60.0],
            [80.0, 0.0, 99.0, 9.0],
        ]
    )
    probs = torch.tensor(
        [
            [0.50, 0.25],  # suppressed by proposal 1 in class 0 only
            [0.60, 0.20],
            [0.05, 0.15],
            [0.01, 0.02],
        ]
    )
    idx, best = vmb.select_boxes(probs, boxes, conf_thresh=0.0, max_boxes=3)
    assert idx.tolist() == [1, 0, 2]  # by best surviving score: 0.6, 0.25 (class 1), 0.15
    assert np.allclose(best.tolist(), [0.60, 0.25, 0.15])
    # above a threshold only: proposal 3 keeps 0 and still comes, last, when asked for
    idx, best = vmb.select_boxes(probs, boxes, conf_thresh=0.03, max_boxes=4)
    assert idx.tolist() == [1, 0, 2, 3] and best[-1] == 0
    # strictly above: a score equal to the threshold counts as none
    idx, best = vmb.select_boxes(probs, boxes, conf_thresh=0.25, max_boxes=4)
    assert best.tolist() == [pytest.approx(0.6), 0, 0, 0]
    # the +1 IoU: 110 / 121 = 0.909; at 0.905 proposal 0 is suppressed, as in the script
    idx, best = vmb.select_boxes(probs[:2, :1], boxes[:2], 0.0, 2, nms_iou=0.905)
    assert idx.tolist() == [1, 0] and best.tolist()[1] == 0


def test_a_vinvl_json_label_map_gives_the_names_by_id(tmp_path):
    from mmf_uvlp.extraction.detector import read_names

    path = tmp_path / "VG-SGG-dicts-vgoi6-clipped.json"
    path.write_text(
        '{"label_to_idx": {"table": 2, "man": 1, "tree": 3}, '
        '"idx_to_label": {"1": "man", "2": "table", "3": "tree"}, '
        '"attribute_to_idx": {"wooden": 2, "red": 1}}'
    )
    assert read_names(str(path), "class") == ["man", "table", "tree"]
    assert read_names(str(path), "attribute") == ["red", "wooden"]
    path.write_text('{"label_to_idx": {"man": 1, "tree": 3}}')
    with pytest.raises(ValueError, match="ids must be 1 to 2"):
        read_names(str(path), "class")
    with pytest.raises(ValueError, match="'attribute_to_idx'"):
        read_names(str(path), "attribute")


def test_vmb_features_are_fc6_or_fc7_after_their_relu():
    model = _build(vmb.vmb_config)
    heads = model.roi_heads
    generator = torch.Generator().manual_seed(6)
    features = {
        f"p{i}": torch.rand(1, 512, 64 // 2**i, 64 // 2**i, generator=generator)
        for i in range(2, 6)
    }
    boxes = [Boxes(torch.tensor([[4.0, 8.0, 60.0, 90.0], [30.0, 2.0, 120.0, 50.0]]))]
    with torch.no_grad():
        pooled = heads.box_pooler([features[f"p{i}"] for i in range(2, 6)], boxes).flatten(1)
        fc1, fc2 = heads.box_head.fc1, heads.box_head.fc2
        fc6 = torch.relu(pooled @ fc1.weight.T + fc1.bias)
        fc7 = torch.relu(fc6 @ fc2.weight.T + fc2.bias)
        for layer, want in (("fc6", fc6), ("fc7", fc7)):
            got, head_out = vmb.box_features(heads, features, boxes, layer)
            assert torch.allclose(got, want, atol=1e-4) and torch.allclose(head_out, fc7, atol=1e-4)
    assert not torch.allclose(fc6, fc7)
    with pytest.raises(ValueError, match="--feature-layer fc8"):
        vmb.box_features(heads, features, boxes, "fc8")
