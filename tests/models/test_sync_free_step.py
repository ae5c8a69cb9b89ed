"""A uvla step on the plugin's batches makes no host sync (forward, losses, curriculum and
the non-finite flag), nor does the ``uvlp`` trainer's step around it (batch preparation,
forward, non-finite check, backward, optimizer), in pre-training and in a fine-tuning step of
each task on MMF's own datasets; the check that proves it fails on a step that syncs."""
# ruff: noqa: F811  (pytest fixtures imported from helpers.collated are test parameters)

import types

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import mmf  # noqa: F401  (registers the plugin's components)

from mmf_uvlp.trainers.finite_loss import DeferredFiniteCheck, NonFiniteLoss, finite_flag
from mmf_uvlp.utils.host_sync import HostSyncError, no_host_sync

from mmf_uvlp.trainers.finite_loss import NonFiniteLossStop
from mmf_uvlp.trainers.rc10_trainer import UVLPTrainer
from mmf_uvlp.trainers.precision import FLOAT32, MixedPrecision

from helpers import REPO
from helpers.collated import both_batches, processors, registry_state, tiny_model  # noqa: F401

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _on_device(batch):
    return batch.to(DEVICE)


@pytest.mark.parametrize("kind", ["rt", "rn", "is"])
def test_a_step_on_a_collated_batch_makes_no_host_sync(processors, kind):
    _, batch = both_batches(processors, kind)
    model = tiny_model().to(DEVICE).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    check = DeferredFiniteCheck()
    batch = _on_device(batch)
    with no_host_sync(DEVICE):
        output = model(batch)  # forward, the curriculum's clean pass, MMF's losses
        check.submit(output["losses"], batch, "toy", 1, optimizer)
    assert "curriculum_weights" in output and len(output["losses"]) == 5
    check.flush()  # finite: nothing raised


@pytest.mark.parametrize("kind", ["rt", "rn"])
def test_the_sync_check_fails_on_a_step_that_syncs(processors, kind):
    fixed_size, _ = both_batches(processors, kind)  # MMF's collation: no host-computed indices
    model = tiny_model().to(DEVICE).train()
    with pytest.raises(HostSyncError, match=r"nonzero\(\) .*heads\.py"):
        with no_host_sync(DEVICE):
            model(_on_device(fixed_size))


def _trainer(model: torch.nn.Module) -> UVLPTrainer:
    """The ``uvlp`` trainer (MMF 1.0.0rc10's) around ``model``, at update 4, in float32."""
    trainer = UVLPTrainer.__new__(UVLPTrainer)
    trainer.__dict__.update(
        model=model,
        num_updates=4,
        profile=lambda *a: None,
        mixed_precision=MixedPrecision(FLOAT32),
        non_finite=NonFiniteLossStop(),
        lr_scheduler=None,
        tb_writer=None,
        should_clip_gradients=True,
        config=OmegaConf.create({"training": {"max_grad_l2_norm": 1.0, "clip_norm_mode": "all"}}),
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True),
        dataset_loader=types.SimpleNamespace(prepare_batch=_on_device),
    )
    return trainer


def _trainer_step(trainer: UVLPTrainer, batch) -> None:
    """What the trainer's loop does with one training batch (MMF 1.0.0rc10's ``train``)."""
    report = trainer._forward_pass(batch)
    trainer._backward(trainer._extract_loss(report))


def test_the_uvlp_trainers_step_makes_no_host_sync(processors):
    _, batch = both_batches(processors, "rt")
    trainer = _trainer(tiny_model().to(DEVICE).train())
    before = [weight.detach().clone() for weight in trainer.model.parameters()]
    with no_host_sync(DEVICE):
        _trainer_step(trainer, batch)
        _trainer_step(trainer, batch)  # the first update's check is read here
    assert trainer.num_updates == 6
    assert any(
        not torch.equal(old, new.detach()) for old, new in zip(before, trainer.model.parameters())
    )
    trainer.non_finite.flush()  # as before a checkpoint: finite, nothing raised


FINE_TUNING = ("vqa2", "nlvr2", "visual_entailment", "refcoco_plus")


def _fine_tuning(task: str, world, tmp_path):
    """A training batch of ``task`` as MMF's own dataset and ``DatasetLoader`` prepare it on
    the tiny world, on the device, and uvla built for it as MMF's trainer builds it."""
    from mmf.utils.build import build_model

    from mmf_uvlp.trainers.train_loaders import seeded_loaders

    zoo = tmp_path / "no_dataset_zoo.yaml"
    zoo.write_text("{}")
    loaders = seeded_loaders(
        [
            f"config={REPO / 'projects/uvla/finetune' / task}.yaml",
            f"env.data_dir={world}",
            f"env.dataset_zoo={zoo}",
            "model_config.uvla.feature_dim=64",
            "training.batch_size=4",
            "model_config.uvla.pretrained_checkpoint=None",
        ]
    )
    batch = loaders.prepare_batch(next(iter(loaders.train_loader)))
    attributes = loaders.config.model_config.uvla
    attributes.model = "uvla"
    return _on_device(batch), build_model(attributes).to(DEVICE).train()


@pytest.mark.parametrize("task", FINE_TUNING)
def test_a_fine_tuning_step_of_each_task_makes_no_host_sync(
    task, tiny_world, mmf_registry, tmp_path
):
    mmf_registry.unregister("config")  # MMF's configuration reads the run's own
    batch, model = _fine_tuning(task, tiny_world, tmp_path)
    images = [batch] if "img0" not in batch else [batch.img0, batch.img1]
    assert all(isinstance(image.image_info_0.bbox[0], np.ndarray) for image in images)  # MMF's
    trainer = _trainer(model)
    before = [weight.detach().clone() for weight in trainer.model.parameters()]
    with no_host_sync(DEVICE):
        _trainer_step(trainer, batch)
        _trainer_step(trainer, batch)
    assert trainer.num_updates == 6
    assert any(
        not torch.equal(old, new.detach()) for old, new in zip(before, trainer.model.parameters())
    )
    trainer.non_finite.flush()


@pytest.mark.parametrize(
    "call",
    [lambda t: t.sum().item(), lambda t: t.tolist(), lambda t: bool(t.any())],
    ids=["item", "tolist", "bool"],
)
def test_the_sync_check_fails_on_a_trainer_step_that_syncs(processors, call):
    _, batch = both_batches(processors, "rt")
    trainer = _trainer(tiny_model().to(DEVICE).train())

    def prepare_and_read(sample_list):
        prepared = _on_device(sample_list)
        call(prepared.region_features)  # a value of the step's own batch, on the device
        return prepared

    trainer.dataset_loader.prepare_batch = prepare_and_read
    with pytest.raises(HostSyncError, match="waits for the device, at .*test_sync_free_step"):
        with no_host_sync(DEVICE):
            _trainer_step(trainer, batch)


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.sum().item(),
        lambda t: t.tolist(),
        lambda t: bool(t.any()),
        lambda t: t[t > 0],
        lambda t: torch.tensor([1.0, 2.0], device=t.device),
        lambda t: torch.as_tensor([3], device=t.device),
    ],
    ids=["item", "tolist", "bool", "mask-index", "tensor-of-host-data", "as_tensor-of-host-data"],
)
def test_the_sync_check_names_each_kind_of_sync(call):
    tensor = torch.ones(3, device=DEVICE)
    call(tensor)  # fine outside the block
    # the line that made the call (the lambda's), not the line that called the lambda
    with pytest.raises(
        HostSyncError, match=r"waits for the device, at .*test_sync_free_step.py:\d+ \(lambda t:"
    ):
        with no_host_sync(DEVICE):
            call(tensor)


def test_a_deferred_non_finite_loss_is_skipped_on_the_device_and_named_next_update():
    weight = torch.nn.Parameter(torch.ones(2, device=DEVICE))
    optimizer = torch.optim.AdamW([weight], lr=0.1, fused=True)
    check = DeferredFiniteCheck()
    batch = {"image_id": ["a", "b"], "region_features": torch.tensor([[1.0], [float("nan")]])}
    loss = (weight * batch["region_features"].to(DEVICE).view(-1)).sum()
    with no_host_sync(DEVICE):
        check.submit({"train/toy/uvla_mrfr": loss}, batch, "toy", 7, optimizer)
    loss.backward()
    optimizer.step()
    assert torch.equal(weight.detach().cpu(), torch.ones(2))  # the update changed nothing
    with pytest.raises(
        NonFiniteLoss,
        match=r"update 7 on dataset toy .*image_id b has "
        r"non-finite values in region_features.*optimizer skipped it",
    ):
        check.submit({"train/toy/uvla_mrfr": weight.sum()}, batch, "toy", 8, optimizer)


def test_finite_flag_is_a_device_tensor():
    flag = finite_flag(
        {"a": torch.tensor(1.0, device=DEVICE), "b": torch.tensor(float("inf"), device=DEVICE)}
    )
    assert torch.is_tensor(flag) and not bool(flag)
    assert finite_flag({"n": 3}) is None
