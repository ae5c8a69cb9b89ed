"""The visual-reliance probe: hand-checked losses on a stub model, the held-out probes, and
uvlp-probe-visual-reliance end to end on the tiny world."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mmf_uvlp.analysis.regions import ImageRegions
from mmf_uvlp.analysis.visual_reliance import Probe, make_probes, measure
from mmf_uvlp.data_formats.text import read_captions
from mmf_uvlp.cli import probe_visual_reliance

from helpers.probes import tiny_probe_run


class _Stub(torch.nn.Module):
    """Text hidden state = the sum of the region features (or zeros: ``blind``)."""

    def __init__(self, blind: bool):
        super().__init__()
        self.blind = blind
        self.heads = {"mlm": type("Head", (), {"vocab_head": staticmethod(lambda h: h)})()}

    def encode(self, batch):
        summed = (batch["region_features"] * batch["region_mask"].unsqueeze(-1)).sum(1)
        hidden = torch.zeros_like(summed) if self.blind else summed
        length = batch["input_ids"].size(1)
        return type("Encoded", (), {"text": hidden.unsqueeze(1).expand(-1, length, -1)})()


def _image(image_id: str, features) -> ImageRegions:
    features = np.asarray(features, dtype=np.float32)
    n = features.shape[0]
    return ImageRegions(
        image_id,
        10,
        10,
        np.tile([[0, 0, 5, 5]], (n, 1)).astype(np.float32),
        features,
        np.ones(n, np.float32),
        (),
    )


def test_gain_is_the_paired_loss_difference_and_zero_for_a_blind_model():
    store = {"a": _image("a", [[3.0, 0.0, 0.0]]), "b": _image("b", [[0.0, 0.0, 2.0]])}
    probes = [Probe((101, 7, 102), 1, 0, "a", "b"), Probe((101, 7, 102), 1, 2, "b", "a")]
    result = measure(_Stub(blind=False), probes, store, mask_id=103)
    own = [
        F.cross_entropy(torch.tensor([[3.0, 0, 0]]), torch.tensor([0])).item(),
        F.cross_entropy(torch.tensor([[0.0, 0, 2]]), torch.tensor([2])).item(),
    ]
    other = [
        F.cross_entropy(torch.tensor([[0.0, 0, 2]]), torch.tensor([0])).item(),
        F.cross_entropy(torch.tensor([[3.0, 0, 0]]), torch.tensor([2])).item(),
    ]
    assert result.own == pytest.approx(sum(own) / 2) and result.other == pytest.approx(
        sum(other) / 2
    )
    gains = [o - s for o, s in zip(other, own)]
    assert result.gain == pytest.approx(sum(gains) / 2) and result.gain > 0
    assert result.stderr == pytest.approx(abs(gains[0] - gains[1]) / math.sqrt(2) / math.sqrt(2))
    blind = measure(_Stub(blind=True), probes, store, mask_id=103)
    assert blind.gain == 0.0 and blind.own == pytest.approx(math.log(3))
    with pytest.raises(ValueError, match="nothing to probe"):
        measure(_Stub(blind=False), [], store, mask_id=103)


def test_probes_mask_a_class_word_of_held_out_captions_only(tmp_path):
    from transformers import BertTokenizerFast
    import os

    tokenizer = BertTokenizerFast.from_pretrained(os.environ["UVLP_BERT"])
    captions = [
        ("i0", "a dog on the grass"),
        ("i1", "a cat"),
        ("i2", "nothing here"),
        ("i3", "a bus"),
        ("i4", "a red car and a dog"),
    ]
    dog, car = (tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in ("dog", "car"))
    probes = make_probes(captions, tokenizer, {dog, car}, holdout_every=2, max_length=24, seed=0)
    # Held out: i0, i2, i4; i2 mentions no class; the other image is the next held-out one.
    assert [(p.image_id, p.other_image_id) for p in probes] == [("i0", "i2"), ("i4", "i0")]
    for probe in probes:
        assert probe.input_ids[probe.position] == probe.target and probe.target in {dog, car}
    with pytest.raises(ValueError, match="at least 2"):
        make_probes(captions, tokenizer, {dog}, holdout_every=5, max_length=24, seed=0)
    bad = tmp_path / "captions_gt.tsv"
    bad.write_text("i0\ta dog\nno tab here\n")
    with pytest.raises(ValueError, match=r"captions_gt.tsv:2.*2 tab-separated columns"):
        list(read_captions(bad))


def _tool():
    return probe_visual_reliance.main


def test_tool_on_the_tiny_world(tiny_world, tmp_path, capsys):
    model, args = tiny_probe_run(tiny_world, tmp_path, ["mlm"])
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
    result = json.loads((tmp_path / "r.json").read_text())["models"]["tiny"]
    assert result["captions"] >= 2 and math.isfinite(result["gain_nats"])
    assert result["gain_nats"] == pytest.approx(
        result["other_image_nats"] - result["own_image_nats"], abs=1e-5
    )
    assert result["gain_nats"] != 0.0  # a random model's output does depend on the regions
    # A checkpoint without an MLM head is refused by name.
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("heads.")}
    torch.save(state, tmp_path / "no_head.pth")
    assert _tool()([*args, "--model", f"x={tmp_path / 'no_head.pth'}"]) == 2
    assert "no MLM head" in capsys.readouterr().err
