"""The box selections against hand-written references on crafted scores: the best-scoring
proposals are kept, not the first ones (bottom-up attention's generate_tsv.py rule and LXMERT's
max-class rule, mmf_uvlp/extraction/selection.py)."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("detectron2")  # torchvision's nms: the extraction environment

from mmf_uvlp.extraction.selection import (  # noqa: E402
    Selection,
    select_max_class,
    select_per_class,
)


def iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def greedy_nms(boxes, scores, threshold):
    """Indices kept, best first: each box drops every later one overlapping it more."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept = []
    for i in order:
        if all(iou(boxes[i], boxes[j]) <= threshold for j in kept):
            kept.append(i)
    return kept


def reference_per_class(scores, boxes, sel):
    """generate_tsv.py: per-class NMS gives each proposal its best surviving score; those at
    least conf_thresh in index order, else the best min_boxes / max_boxes."""
    n, c = len(scores), len(scores[0])
    max_conf = [0.0] * n
    for k in range(c):
        for i in greedy_nms(
            [boxes[i][k] for i in range(n)], [scores[i][k] for i in range(n)], sel.nms_iou
        ):
            max_conf[i] = max(max_conf[i], scores[i][k])
    best = sorted(range(n), key=lambda i: (-max_conf[i], i))
    kept = [i for i in range(n) if max_conf[i] >= sel.conf_thresh]
    if len(kept) < sel.min_boxes:
        return best[: sel.min_boxes]
    if len(kept) > sel.max_boxes:
        return best[: sel.max_boxes]
    return kept


def reference_max_class(scores, boxes, size, sel):
    """LXMERT's script: each proposal's best class and its box, clipped; one NMS, its IoU
    raised by 0.1 until min_boxes survive; the first max_boxes."""
    height, width = size
    labels = [max(range(len(row)), key=lambda k: (row[k], -k)) for row in scores]
    best = [row[k] for row, k in zip(scores, labels)]
    picked = []
    for i, k in enumerate(labels):
        x1, y1, x2, y2 = boxes[i][k]
        picked.append(
            [
                min(max(x1, 0), width),
                min(max(y1, 0), height),
                min(max(x2, 0), width),
                min(max(y2, 0), height),
            ]
        )
    for threshold in np.arange(sel.nms_iou, 0.95, 0.1):
        kept = greedy_nms(picked, best, threshold)[: sel.max_boxes]
        if len(kept) >= sel.min_boxes:
            break
    return kept


def crafted(n=12, c=3):
    """Proposals whose scores rise with their index, each class's box its own, apart from
    the others but for a few overlapping pairs."""
    scores = np.zeros((n, c), dtype=np.float32)
    boxes = np.zeros((n, c, 4), dtype=np.float32)
    for i, k in itertools.product(range(n), range(c)):
        scores[i, k] = 0.02 * i + 0.005 * k + 0.01
        x = 30.0 * i
        boxes[i, k] = [x, 10.0 * k, x + 20.0, 10.0 * k + 20.0]
    boxes[5] = boxes[4] + np.array([1.0, 0.0, 1.0, 0.0])  # 5 hides behind 4 at NMS 0.3
    return scores, boxes


def test_per_class_keeps_the_best_scoring_proposals_not_the_first():
    scores, boxes = crafted()
    sel = Selection(min_boxes=2, max_boxes=3, conf_thresh=0.0, proposals=12)
    got = select_per_class(torch.from_numpy(scores), torch.from_numpy(boxes), sel).tolist()
    assert got == reference_per_class(scores.tolist(), boxes.tolist(), sel) == [11, 10, 9]


def test_per_class_keeps_those_above_the_threshold_in_proposal_order():
    scores, boxes = crafted()
    sel = Selection(min_boxes=2, max_boxes=10, conf_thresh=0.15, proposals=12)
    got = select_per_class(torch.from_numpy(scores), torch.from_numpy(boxes), sel).tolist()
    assert got == reference_per_class(scores.tolist(), boxes.tolist(), sel)
    assert got == [7, 8, 9, 10, 11]
    sel = Selection(min_boxes=8, max_boxes=10, conf_thresh=0.15, proposals=12)
    got = select_per_class(torch.from_numpy(scores), torch.from_numpy(boxes), sel).tolist()
    assert got == reference_per_class(scores.tolist(), boxes.tolist(), sel)
    assert got == [11, 10, 9, 8, 7, 6, 5, 3]  # too few: the best 8; 5's NMS drops 4


def test_max_class_keeps_the_best_scoring_boxes_not_the_first():
    scores, boxes = crafted()
    sel = Selection(method="max-class", min_boxes=3, max_boxes=3, proposals=12)
    got = select_max_class(
        torch.from_numpy(scores), torch.from_numpy(boxes), (100, 400), sel
    ).tolist()
    assert got == reference_max_class(scores.tolist(), boxes.tolist(), (100, 400), sel)
    assert got == [11, 10, 9]


@pytest.mark.parametrize("seed", range(4))
def test_both_rules_agree_with_the_references_on_random_overlapping_boxes(seed):
    rng = np.random.default_rng(seed)
    n, c = 30, 4
    scores = rng.dirichlet(np.ones(c + 1), n)[:, :c].astype(np.float32)
    corner = rng.uniform(-20, 180, (n, c, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(10, 80, (n, c, 2))], axis=2)
    boxes = boxes.astype(np.float32)
    per_class = Selection(min_boxes=3, max_boxes=8, conf_thresh=0.3, proposals=30)
    assert select_per_class(
        torch.from_numpy(scores), torch.from_numpy(boxes), per_class
    ).tolist() == reference_per_class(scores.tolist(), boxes.tolist(), per_class)
    max_class = Selection(method="max-class", min_boxes=10, max_boxes=12, proposals=30)
    assert select_max_class(
        torch.from_numpy(scores), torch.from_numpy(boxes), (150, 200), max_class
    ).tolist() == reference_max_class(scores.tolist(), boxes.tolist(), (150, 200), max_class)
