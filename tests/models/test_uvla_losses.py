"""μ-VLA losses on tiny hand-computed inputs, the per-sample curriculum and its epoch schedule."""

import math

import pytest
import torch
from omegaconf import OmegaConf

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf_uvlp.losses.curriculum import CurriculumWeighting
from mmf_uvlp.losses.itm import ImageTextMatchingLoss
from mmf_uvlp.losses.mlm import MaskedLanguageModelingLoss
from mmf_uvlp.losses.mrc import MaskedRegionClassificationLoss
from mmf_uvlp.losses.mrfr import MaskedRegionFeatureRegressionLoss
from mmf_uvlp.losses.pmrtc import PhraseRegionTokenLoss
from mmf_uvlp.trainers.progress import clear_train_samples, current_epoch, register_train_samples

LN = math.log


@pytest.fixture
def progress_state():
    """A registry with a config, sizes and an update counter; restored afterwards."""
    saved = {key: registry.get(key, None, no_warning=True) for key in ("config", "num_updates")}
    saved_sizes = registry.get("uvla_train_samples", {}, no_warning=True)
    registry.register("config", OmegaConf.create({"training": {"batch_size": 8}}))
    clear_train_samples()
    yield
    for key, value in saved.items():
        registry.register(key, value)
    registry.register("uvla_train_samples", saved_sizes)


def _mlm_case():
    """Two samples: sample 0 has two masked tokens, sample 1 one (vocabulary of 2)."""
    labels = torch.full((2, 4), -1)
    labels[0, 1], labels[0, 2], labels[1, 3] = 1, 0, 0
    index = (labels != -1).nonzero()  # rows: (0,1), (0,2), (1,3)
    logits = torch.tensor([[0.0, 0.0], [LN(3), 0.0], [0.0, LN(3)]])
    # per token: ln 2, -ln(3/4), -ln(1/4)
    per_sample = [(LN(2) + LN(4 / 3)) / 2, LN(4)]
    return {"lm_label_ids": labels}, {"mlm_logits": logits, "mlm_index": index}, per_sample


def test_mlm_loss_hand_computed():
    batch, output, per_sample = _mlm_case()
    loss = MaskedLanguageModelingLoss()(batch, output)
    assert loss.item() == pytest.approx(sum(per_sample) / 2, rel=1e-6)


def test_mlm_loss_weights_each_sample():
    batch, output, per_sample = _mlm_case()
    output["curriculum_weights"] = torch.tensor([1.0, 0.5])
    loss = MaskedLanguageModelingLoss(weight=2.0)(batch, output)
    assert loss.item() == pytest.approx(2.0 * (per_sample[0] + 0.5 * per_sample[1]) / 2, rel=1e-6)


def test_mrc_loss_hand_computed_and_averages_samples_with_targets():
    classes = torch.tensor([[2, -1, -1], [-1, -1, -1], [-1, 0, -1]])
    index = (classes != -1).nonzero()  # (0,0), (2,1)
    logits = torch.tensor([[0.0, 0.0, LN(2)], [LN(3), 0.0, 0.0]])  # p = 2/4, 3/5
    loss = MaskedRegionClassificationLoss()(
        {"region_class_targets": classes}, {"mrc_logits": logits, "mrc_index": index}
    )
    assert loss.item() == pytest.approx((LN(2) + LN(5 / 3)) / 2, rel=1e-6)  # sample 1: no target


def test_mrfr_regresses_to_the_original_not_the_masked_input():
    original = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    zeroed = original.clone()
    zeroed[0, 1] = 0.0  # region 1 masked: its input was zeroed
    batch = {
        "region_features": zeroed,
        "region_features_target": original,
        "region_masked": torch.tensor([[0, 1]]),
    }
    index = torch.tensor([[0, 1]])
    exact = {"mrfr_features": torch.tensor([[3.0, 4.0]]), "mrfr_index": index}
    assert MaskedRegionFeatureRegressionLoss()(batch, exact).item() == 0.0
    predicts_zero = {"mrfr_features": torch.zeros(1, 2), "mrfr_index": index}
    mean = MaskedRegionFeatureRegressionLoss()(batch, predicts_zero)
    assert mean.item() == pytest.approx((9 + 16) / 2)
    summed = MaskedRegionFeatureRegressionLoss(feature_reduction="sum")(batch, predicts_zero)
    assert summed.item() == pytest.approx(25.0)
    with pytest.raises(ValueError, match="feature_reduction"):
        MaskedRegionFeatureRegressionLoss(feature_reduction="max")


def test_pmrtc_soft_target_over_the_phrase_word_pieces():
    targets = torch.full((1, 2, 3), -1)
    targets[0, 1, :2] = torch.tensor([1, 3])  # region 1 linked to a 2-piece phrase
    index = torch.tensor([[0, 1]])
    logits = torch.log(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))  # softmax = k / 10
    loss = PhraseRegionTokenLoss()(
        {"region_phrase_targets": targets}, {"pmrtc_logits": logits, "pmrtc_index": index}
    )
    assert loss.item() == pytest.approx(-(LN(0.2) + LN(0.4)) / 2, rel=1e-6)


def test_itm_loss_skips_not_applicable_samples():
    labels = torch.tensor([1, 0, -1])
    logits = torch.tensor([[0.0, LN(3)], [0.0, LN(3)], [5.0, -5.0]])  # p(match) = 3/4
    loss = ImageTextMatchingLoss()({"itm_label": labels}, {"itm_logits": logits})
    assert loss.item() == pytest.approx((LN(4 / 3) + LN(4)) / 2, rel=1e-6)


def test_empty_targets_give_a_zero_that_backpropagates():
    logits = torch.zeros(0, 5, requires_grad=True)
    output = {"mlm_logits": logits, "mlm_index": torch.zeros(0, 2, dtype=torch.long)}
    loss = MaskedLanguageModelingLoss()({"lm_label_ids": torch.full((2, 3), -1)}, output)
    assert loss.item() == 0.0 and loss.requires_grad
    assert MaskedRegionClassificationLoss()({}, {"itm_logits": torch.zeros(2, 2)}).item() == 0.0


def test_per_sample_weighting_differs_from_batch_mean_weighting():
    # Per-sample losses 1 and 3 (ITM logits crafted so that w = 0.9 and 0.1).
    labels = torch.full((2, 1), -1)
    labels[:, 0] = 0
    index = (labels != -1).nonzero()
    p0, p1 = math.exp(-1.0), math.exp(-3.0)  # p(target) giving CE 1 and 3
    logits = torch.log(torch.tensor([[p0, 1 - p0], [p1, 1 - p1]]))
    itm = torch.log(torch.tensor([[0.1, 0.9], [0.9, 0.1]]))
    schedule = CurriculumWeighting(1.0, epoch_fn=lambda: 1.0)
    weights = schedule.weights(itm, torch.tensor([True, True]))
    assert weights.tolist() == pytest.approx([0.9, 0.1])
    output = {"mlm_logits": logits, "mlm_index": index, "curriculum_weights": weights}
    loss = MaskedLanguageModelingLoss()({"lm_label_ids": labels}, output).item()
    assert loss == pytest.approx((0.9 * 1 + 0.1 * 3) / 2, rel=1e-5)  # 0.6
    batch_mean_weighting = weights.mean().item() * (1 + 3) / 2  # the reference code: 1.0
    assert abs(loss - batch_mean_weighting) > 0.3


def test_no_gradient_flows_through_the_curriculum_weight():
    itm = torch.tensor([[0.2, 0.5], [1.0, -1.0]], requires_grad=True)
    schedule = CurriculumWeighting(0.0, epoch_fn=lambda: 0.0)
    weights = schedule.weights(itm, torch.tensor([True, False]))
    assert not weights.requires_grad
    expected_match = torch.softmax(itm.detach(), -1)[0, 1].item()
    assert weights.tolist() == pytest.approx([expected_match, 1.0])  # unflagged sample keeps 1
    batch, output, _ = _mlm_case()
    output["mlm_logits"].requires_grad_(True)
    output["curriculum_weights"] = weights
    MaskedLanguageModelingLoss()(batch, output).backward()
    assert itm.grad is None and output["mlm_logits"].grad is not None


def test_epoch_is_derived_from_updates_batch_size_and_all_dataset_sizes(progress_state):
    register_train_samples("rt", 30)
    register_train_samples("rn", 10)
    registry.register("num_updates", 4)
    assert current_epoch() == pytest.approx(4 * 8 / 40)
    with pytest.raises(ValueError, match="dataset_name"):
        register_train_samples("a.b", 3)


def test_epoch_needs_registered_sizes(progress_state):
    with pytest.raises(RuntimeError, match="register_train_samples"):
        current_epoch()


@pytest.mark.parametrize("start_epoch, switch_update", [(1, 5), (2, 10)])
def test_curriculum_switches_exactly_at_epoch_m(progress_state, start_epoch, switch_update):
    register_train_samples("rt", 30)
    register_train_samples("is", 10)  # 40 samples, batch 8: one epoch = 5 updates
    schedule = CurriculumWeighting(start_epoch)
    itm = torch.tensor([[0.0, 0.0]])
    flagged = torch.tensor([True])
    for updates in range(switch_update + 2):
        registry.register("num_updates", updates)  # what MMF's trainer (or a resume) registers
        weight = schedule.weights(itm, flagged).item()
        assert weight == (0.5 if updates >= switch_update else 1.0), updates


def test_the_log_says_when_the_curriculum_switches_on_and_its_w_itm_every_interval():
    curriculum = CurriculumWeighting(start_epoch=0.5, epoch_fn=lambda: 0.0)
    weights = torch.tensor([0.2, 1.0, 0.6])
    weighted = torch.tensor([True, False, True])
    assert curriculum.log_lines(torch.ones(3), weighted, False, 1, 0.25, 2) == []
    assert curriculum.log_lines(weights, weighted, True, 3, 0.5, 2) == [
        "curriculum: on from update 3 (epoch 0.500 >= m = 0.5): the losses of the weighted "
        "samples (R-N, I-S) are multiplied by w_ITM"
    ]
    # update 4: the statistics of updates 3 and 4, over the weighted samples only
    lines = curriculum.log_lines(torch.tensor([0.9, 1.0, 1.0]), weighted, True, 4, 0.6, 2)
    assert lines == [
        "curriculum: w_ITM at update 4 over 4 weighted samples of the last 2 "
        "updates: mean 0.6750, min 0.2000, max 1.0000"
    ]
    assert curriculum.log_lines(weights, torch.zeros(3, dtype=torch.bool), True, 5, 0.7, 2) == []
    assert curriculum.log_lines(weights, torch.zeros(3, dtype=torch.bool), True, 6, 0.8, 2) == [
        "curriculum: w_ITM at update 6: no weighted samples in the last 2 updates"
    ]
