"""The MRC-shortcut probe: hand-checked losses on a stub that reads tags by their box, the
R-T input it builds, and uvlp-probe-mrc-shortcut end to end on the tiny world."""

import json
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mmf_uvlp.analysis.mrc_shortcut import (
    TagProbe,
    class_prior_entropy,
    measure_reading,
)
from mmf_uvlp.processors.region_tag_masking import tag_word_pieces
from mmf_uvlp.analysis.regions import ImageRegions
from mmf_uvlp.cli import probe_mrc_shortcut

from helpers.probes import tiny_probe_run


CLASSES = 4
MASK = 103  # 103 % 4 == 3: a hidden tag reads as class 3


class _BoxReader(torch.nn.Module):
    """Reads across the box, both ways, 0 when ``blind``: a region's hidden state is
    one-hot(token id % CLASSES) of the tag tokens that share its box (the MRC classifier is
    the identity); a text position's is one-hot(argmax of its region's features) over a
    vocabulary of CLASSES ids (the MLM vocabulary head is the identity)."""

    def __init__(self, blind: bool):
        super().__init__()
        self.blind = blind
        identity = staticmethod(lambda h: h)
        self.heads = {
            "mrc": type("Head", (), {"classifier": identity})(),
            "mlm": type("Head", (), {"vocab_head": identity})(),
        }

    def encode(self, batch):
        boxes, text_boxes = batch["region_boxes"], batch["text_boxes"]  # (B, R, 5), (B, L, 5)
        same = (boxes.unsqueeze(2) == text_boxes.unsqueeze(1)).all(-1)  # (B, R, L)
        same &= batch["text_is_tag"].bool().unsqueeze(1)
        tokens = F.one_hot(batch["input_ids"] % CLASSES, CLASSES).float()  # (B, L, C)
        features = batch["region_features"]  # (B, R, C): zeroed rows read as nothing
        seen = F.one_hot(features.argmax(-1), CLASSES).float() * (
            features.abs().sum(-1, keepdim=True) > 0
        )
        scale = 0.0 if self.blind else 1.0
        return type(
            "Encoded",
            (),
            {
                "regions": scale * (same.float() @ tokens),
                "text": scale * (same.float().transpose(1, 2) @ seen),
            },
        )()


def _image(image_id: str, classes) -> ImageRegions:
    n = len(classes)
    boxes = np.array([[k, k, k + 2, k + 2] for k in range(n)], dtype=np.float32)
    features = np.eye(CLASSES, dtype=np.float32)[list(classes)]  # region k "looks like" its class
    return ImageRegions(image_id, 10, 10, boxes, features, np.ones(n, np.float32), ())


def test_each_gain_is_what_the_other_side_is_worth_and_zero_for_a_blind_model():
    store = {"a": _image("a", [1, 0]), "b": _image("b", [0, 3, 2])}
    # Tag token k names class k: token 1 for region 0 of a, token 2 for region 2 of b.
    probes = [
        TagProbe("a", (101, 1, 0, 102), (-1, 0, 1, -1), 0, 1),
        TagProbe("b", (101, 0, 3, 2, 102), (-1, 0, 1, 2, -1), 2, 2),
    ]
    one_hot = torch.eye(CLASSES)
    for direction, visible_rows, targets in (("mrc", [1, 2], [1, 2]), ("tag_mlm", [1, 2], [1, 2])):
        result = measure_reading(_BoxReader(blind=False), probes, store, MASK, direction)
        target = torch.tensor(targets)
        visible = F.cross_entropy(one_hot[visible_rows], target, reduction="none")
        # Hidden: the masked tag reads as MASK % 4 = class 3; a zeroed region as nothing.
        hidden_logits = one_hot[[3, 3]] if direction == "mrc" else torch.zeros(2, CLASSES)
        hidden = F.cross_entropy(hidden_logits, target, reduction="none")
        assert result.visible == pytest.approx(float(visible.mean())), direction
        assert result.hidden == pytest.approx(float(hidden.mean())), direction
        assert result.gain == pytest.approx(float((hidden - visible).mean()))
        assert result.gain > 0 and result.visible_accuracy == 1.0
        blind = measure_reading(_BoxReader(blind=True), probes, store, MASK, direction)
        assert blind.gain == 0.0 and blind.visible == pytest.approx(math.log(CLASSES))
    with pytest.raises(ValueError, match="nothing to probe"):
        measure_reading(_BoxReader(blind=False), [], store, MASK)
    with pytest.raises(ValueError, match="direction must be one of"):
        measure_reading(_BoxReader(blind=False), probes, store, MASK, "mrfr")
    assert class_prior_entropy(probes) == pytest.approx(math.log(2))


def test_the_r_t_input_drops_the_tags_that_do_not_fit_whole():
    from transformers import BertTokenizerFast

    tokenizer = BertTokenizerFast.from_pretrained(os.environ["UVLP_BERT"])
    pieces = [
        tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("dog", "traffic light", "cat")
    ]
    ids, owners = tag_word_pieces(
        tokenizer, ["dog", "traffic light", "cat"], max_length=2 + len(pieces[0]) + len(pieces[1])
    )
    assert ids == [tokenizer.cls_token_id, *pieces[0], *pieces[1], tokenizer.sep_token_id]
    assert owners == [-1] + [0] * len(pieces[0]) + [1] * len(pieces[1]) + [-1]
    assert tag_word_pieces(tokenizer, [], 8) == (
        [tokenizer.cls_token_id, tokenizer.sep_token_id],
        [-1, -1],
    )


def _tool():
    return probe_mrc_shortcut.main


def test_tool_on_the_tiny_world(tiny_world, tmp_path, capsys):
    model, args = tiny_probe_run(tiny_world, tmp_path, ["mrc", "mlm"])
    assert (
        _tool()(
            [
                *args,
                "--model",
                f"tiny={tmp_path / 'uvla_final.pth'}",
                "--out",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["class_prior_nats"] > 0
    for direction in ("mrc", "tag_mlm"):
        result = out["models"]["tiny"][direction]
        assert result["images"] >= 2
        assert result["gain_nats"] == pytest.approx(
            result["hidden_nats"] - result["visible_nats"], abs=1e-5
        )
        assert result["gain_nats"] != 0.0  # a random model's output depends on both sides
    assert "with the region's tag visible" in capsys.readouterr().out
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("heads.mrc.")}
    torch.save(state, tmp_path / "no_head.pth")
    assert _tool()([*args, "--model", f"x={tmp_path / 'no_head.pth'}"]) == 2
    assert "no MRC head" in capsys.readouterr().err
