"""MMF main (1.0.0rc12) support, as far as it can be honestly faked beside rc10.

MMF main itself is exercised by tools/check_mmf_main.sh (and tests/compat/test_mmf_main_env.py
inside its environment). Here: the fix set chosen for it, the import hook with an MMF
served by an editable-install finder, the annotation-database hook under MMF main's name,
a ``writer`` without ``write``, the curriculum's update count without the registry's
``num_updates``, and the default configs found inside the package.
"""

import argparse
import functools
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import test_mmf_main_env
from mmf.common.registry import registry
from mmf_uvlp import compat
from mmf_uvlp.compat import lightning as lightning_fixes
from mmf_uvlp.compat import mmf_main as main_fixes
from mmf_uvlp.datasets.annotation_db import AnnotationDbHook
from mmf_uvlp.trainers import progress as training_progress
from mmf_uvlp.trainers.progress import (
    CALLBACK_NAME,
    TrainingProgressCallback,
    clear_train_samples,
    current_epoch,
    register_train_samples,
)
from mmf_uvlp.utils import config_files


# ----------------------------------------------------------------------------- fix set
def test_mmf_main_gets_its_own_fix_set_each_fix_naming_its_error():
    fix_set = compat.fix_set_for("1.0.0rc12")
    assert fix_set.fixes[: len(main_fixes.FIXES.fixes)] == main_fixes.FIXES.fixes
    assert fix_set.mmf_version == compat.MMF_MAIN_VERSION
    assert fix_set is not compat.fix_set_for("1.0.0rc10")
    names = [fix.name for fix in fix_set.fixes]
    assert len(names) == len(set(names)) and all(fix.error for fix in fix_set.fixes)
    assert (
        "Missing key model"
        in dict((f.name, f.error) for f in fix_set.fixes)["model_and_datasets_from_config_file"]
    )


def test_every_main_fix_has_a_check_run_inside_mmf_main():
    names = [fix.name for fix in compat.fix_set_for("1.0.0rc12").fixes]
    assert sorted(names) == sorted(test_mmf_main_env.CHECKS)


# ----------------------------------------------------------------------------- import hook
EDITABLE_FINDER = '''
import importlib.abc, importlib.machinery, importlib.util, sys

class EditableFinder(importlib.abc.MetaPathFinder):
    """What `pip install -e` of a setup.py project installs: a finder mapping the package to
    its source folder, which is not on sys.path (placed before PathFinder here, which would
    find the rc10 installed beside)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "mmf":
            return None
        return importlib.util.spec_from_file_location(
            "mmf", SOURCE + "/mmf/__init__.py", submodule_search_locations=[SOURCE + "/mmf"])

sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder), EditableFinder())
'''


def _run_with_editable_mmf(
    tmp_path: Path, version: str, program: str
) -> subprocess.CompletedProcess:
    source = tmp_path / "src"
    (source / "mmf" / "common").mkdir(parents=True)
    (source / "mmf" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (source / "mmf" / "common" / "__init__.py").write_text("")
    (source / "mmf" / "common" / "registry.py").write_text("")
    site = tmp_path / "site"
    dist_info = site / f"mmf-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mmf\nVersion: {version}\n")
    code = (
        f"SOURCE = {str(source)!r}\n" + EDITABLE_FINDER + REGISTRATIONS + textwrap.dedent(program)
    )
    # the fake MMF's metadata first; the rest of PYTHONPATH keeps the checkout under test
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")])),
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


REGISTRATIONS = """
import importlib, sys, types
registered = []
sys.modules["mmf_uvlp.plugin"] = types.SimpleNamespace(
    register_components=lambda: registered.append(True))
"""


def test_an_editable_mmf_triggers_the_fixes_and_registration_exactly_once(tmp_path, monkeypatch):
    program = """
    from mmf_uvlp import compat
    import mmf
    assert "src/mmf" in mmf.__file__, mmf.__file__
    assert compat.active_fix_set() is compat.fix_set_for("1.0.0rc12")
    fixes = [fix for fix in compat.active_fix_set().fixes if fix.trigger == "mmf"]
    assert [fix.failure for fix in fixes] == ["disabled by $MMF_UVLP_DISABLE_FIXES"] * len(fixes)
    importlib.import_module("mmf_uvlp")  # env.user_dir=mmf_uvlp: the module is imported already
    print(registered)
    """
    disabled = ",".join(fix.name for fix in compat.fix_set_for("1.0.0rc12").fixes)
    monkeypatch.setenv(compat.DISABLE_VARIABLE, disabled)  # the fake MMF has no class to patch
    result = _run_with_editable_mmf(tmp_path, "1.0.0rc12", program)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[True]"


def test_with_only_env_user_dir_the_fixes_run_when_the_plugin_is_imported(tmp_path, monkeypatch):
    """MMF first, the plugin later (env.user_dir, no .pth hook): the fixes of MMF main still
    run (here disabled, which they report), and the components register once."""
    program = """
    for name in [m for m in sys.modules if m == "mmf_uvlp" or m.startswith("mmf_uvlp.")]:
        if name != "mmf_uvlp.plugin":
            del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_Finder"]
    import mmf.common.registry
    importlib.import_module("mmf_uvlp")  # what MMF's import_user_module does
    from mmf_uvlp import compat
    fixes = compat.active_fix_set().fixes
    print({fix.failure for fix in fixes if fix.trigger in sys.modules}, registered,
          all(fix.failure is None for fix in fixes if fix.trigger not in sys.modules))
    """
    disabled = ",".join(fix.name for fix in compat.fix_set_for("1.0.0rc12").fixes)
    monkeypatch.setenv(compat.DISABLE_VARIABLE, disabled)
    result = _run_with_editable_mmf(tmp_path, "1.0.0rc12", program)
    assert result.returncode == 0, result.stderr
    # fixes of modules not imported yet (mmf_cli.run, the Lightning trainer) wait for them
    assert result.stdout.strip() == "{'disabled by $MMF_UVLP_DISABLE_FIXES'} [True] True"


def test_the_hook_runs_the_fixes_of_an_editable_mmf(tmp_path):
    """A fix whose trigger is the editable MMF runs before and after its code executes."""
    program = """
    from mmf_uvlp import compat
    from mmf_uvlp.compat import mmf_main as main
    order = []
    main.FIXES.fix("probe_pre", "probe")(lambda: order.append("pre"))
    main.FIXES.fix("probe_post", "probe", stage="post")(lambda: order.append("post"))
    main.FIXES.fixes[:] = [fix for fix in main.FIXES.fixes if fix.name.startswith("probe")]
    compat._FIX_SETS.clear()
    compat._STATE["installed"] = False
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_Finder"]
    compat.install()
    import mmf
    print(order, registered)
    """
    result = _run_with_editable_mmf(tmp_path, "1.0.0rc12", program)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['pre', 'post'] [True]"


# ----------------------------------------------------------------------------- annotation db
def _plugin_dataset_classes():
    import mmf_uvlp.plugin

    mmf_uvlp.plugin.register_components()
    for name, builder in sorted(registry.mapping["builder_name_mapping"].items()):
        if builder.__module__.startswith("mmf_uvlp."):
            dataset_class = builder().dataset_class
            yield name, getattr(dataset_class, "func", dataset_class)


def test_plugin_datasets_override_mmf_mains_annotation_db_hook():
    """MMF main calls build_annotation_db(); an override of rc10's _build_annotation_db only is
    never reached there (the dataset then fails with MMF's 'Unknown file format')."""
    checked = []
    for name, dataset_class in _plugin_dataset_classes():
        owner = next((k for k in dataset_class.__mro__ if "build_annotation_db" in vars(k)), None)
        assert owner is not None and owner.__module__.startswith("mmf_uvlp."), (name, owner)
        assert owner is not AnnotationDbHook, f"{name}: no build_annotation_db of its own"
        rc10_owner = next(k for k in dataset_class.__mro__ if "_build_annotation_db" in vars(k))
        assert rc10_owner is AnnotationDbHook, f"{name}: {rc10_owner} overrides rc10's name"
        checked.append(name)
    assert {"uvla_region_tag", "uvla_region_phrase", "uvla_image_sentence", "refcoco_plus"} <= set(
        checked
    )


def _as_mmf_main_builds_it(dataset_class):
    """``dataset_class`` whose construction reaches the annotation db as MMF main's does:
    only through ``build_annotation_db()`` (rc10's name forwards to it, as in MMF main's
    MMFDataset.__init__)."""
    keywords = getattr(dataset_class, "keywords", {})
    dataset_class = getattr(dataset_class, "func", dataset_class)
    probe = type(
        f"MainConvention{dataset_class.__name__}",
        (dataset_class,),
        {"_build_annotation_db": lambda self: self.build_annotation_db()},
    )
    return functools.partial(probe, **keywords)


@pytest.fixture
def world_config(tiny_corpus, mmf_registry):
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    registry.register("config", None)
    names = ["uvla_region_tag", "uvla_image_sentence", "refcoco_plus"]
    args = argparse.Namespace(
        config_override=None,
        opts=[
            "model=uvla",
            f"datasets={','.join(names)}",
            f"env.data_dir={tiny_corpus.parent}",
            "training.num_workers=0",
        ],
    )
    config = Configuration(args).get_config()
    registry.register("config", config)
    return config, names


def test_datasets_build_the_same_annotations_under_both_mmf_conventions(world_config):
    config, names = world_config
    for name in names:
        dataset_class = registry.get_builder_class(name)().dataset_class
        rc10 = dataset_class(config.dataset_config[name], "train", 0)
        main = _as_mmf_main_builds_it(dataset_class)(config.dataset_config[name], "train", 0)
        assert len(rc10) == len(main) > 0, name
        assert rc10.annotation_db[0] == main.annotation_db[0], name


# ----------------------------------------------------------------------------- writer
def _uvla(**overrides):
    from mmf_uvlp.models.uvla import UVLA

    sizes = {
        "vocab_size": 30522,
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
    }
    config = {
        "bert_model_name": None,
        "bert_config": sizes,
        "feature_dim": 8,
        "num_region_classes": 5,
        "heads": ["pooled_classifier"],
        "num_labels": 3,
        "curriculum": {"enabled": False},
        "losses": [],
    }
    config.update(overrides)
    model = UVLA(OmegaConf.create(config))
    model.build()
    return model


@pytest.fixture
def saved_writer(mmf_registry):
    """The config a model reads; MMF's writer as it was again after the test."""
    registry.register("config", OmegaConf.create({"evaluation": {"predict": False}}))


def test_loading_pretrained_weights_reports_through_mmf_mains_logging_writer(
    saved_writer, tmp_path, caplog
):
    path = tmp_path / "pretrained.pth"
    torch.save(_uvla().state_dict(), path)
    registry.register("writer", logging.getLogger("mmf"))  # what MMF main registers
    with caplog.at_level(logging.INFO, logger="mmf"):
        _uvla(pretrained_checkpoint=str(path))
    assert any(
        "pre-trained tensors" in r.getMessage() and f"from {path}" in r.getMessage()
        for r in caplog.records
    )
    written = []
    registry.register("writer", types.SimpleNamespace(write=written.append))  # rc10's Logger
    _uvla(pretrained_checkpoint=str(path))
    assert len(written) == 1 and f"from {path}" in written[0]


# ----------------------------------------------------------------------------- update count
@pytest.fixture
def progress_state(mmf_registry):
    registry.register("config", OmegaConf.create({"training": {"batch_size": 8}}))
    registry.unregister("num_updates")
    registry.unregister(training_progress.TRAINER_KEY)
    clear_train_samples()
    register_train_samples("rt", 30)
    register_train_samples("is", 10)  # 40 samples, batch 8: one epoch = 5 updates


def test_without_the_registrys_num_updates_the_epoch_follows_the_trainer(progress_state):
    trainer = types.SimpleNamespace(num_updates=0)
    config = OmegaConf.create({"training": {"batch_size": 8}})
    callback = TrainingProgressCallback(
        config, trainer
    )  # what MMF main builds from training.callbacks
    registry.register("num_updates", 99)  # MMF main registers it only when restoring a checkpoint
    for updates in (0, 3, 5, 12):
        trainer.num_updates = updates
        assert current_epoch() == pytest.approx(updates / 5)
    callback.teardown()
    assert registry.get(training_progress.TRAINER_KEY, None, no_warning=True) is None


def test_under_lightning_the_epoch_follows_the_lightning_trainers_step(progress_state):
    """MMF main's Lightning trainer builds no training.callbacks: the model's own trainer."""

    class Attached:  # what a LightningModule attached to a pytorch_lightning.Trainer shows
        trainer = types.SimpleNamespace(global_step=0, accumulate_grad_batches=2)

    class Detached:  # a LightningModule outside Lightning (MMF main's own trainer)
        @property
        def trainer(self):
            raise RuntimeError("Detached is not attached to a `Trainer`.")

    registry.register("num_updates", 3)
    for step in (0, 1, 5):
        Attached.trainer.global_step = step
        assert training_progress.updates_done(Attached()) == step
        assert current_epoch(module=Attached()) == pytest.approx(step * 8 * 2 / 40)
    assert training_progress.updates_done(Detached()) == 3  # rc10's registry count
    assert current_epoch(module=Detached()) == pytest.approx(3 / 5)


def test_mmf_with_trainer_callbacks_but_no_progress_callback_is_a_clear_error(
    progress_state, monkeypatch
):
    monkeypatch.setattr(training_progress, "trainer_has_callbacks", lambda: True)
    with pytest.raises(
        RuntimeError, match=f"training.callbacks must include .type: {CALLBACK_NAME}"
    ):
        current_epoch()


def test_rc10_still_reads_the_registrys_num_updates(progress_state):
    assert not training_progress.trainer_has_callbacks()
    registry.register("num_updates", 10)
    assert current_epoch() == pytest.approx(2.0)


def test_the_uvla_defaults_name_the_progress_callback():
    from mmf_uvlp.models.uvla import UVLA

    defaults = OmegaConf.load(UVLA.config_path())
    assert {"type": CALLBACK_NAME, "params": {}} in OmegaConf.to_container(
        defaults.training.callbacks
    )


# ----------------------------------------------------------------------------- configs
def test_default_configs_come_from_the_package_when_it_has_them(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "mmf_uvlp").mkdir(parents=True)
    (checkout / "configs" / "models").mkdir(parents=True)
    monkeypatch.setattr(config_files, "PACKAGE_DIR", checkout / "mmf_uvlp")
    assert config_files.default_config("models", "a.yaml") == str(
        checkout / "configs/models/a.yaml"
    )
    (checkout / "mmf_uvlp" / "configs").mkdir()  # a wheel: the build put them in the package
    assert config_files.default_config("models", "a.yaml") == str(
        checkout / "mmf_uvlp/configs/models/a.yaml"
    )


def test_every_plugin_config_path_exists():
    import mmf_uvlp.plugin
    from mmf_uvlp.corpus.config import DEFAULT_CONFIG_PATH

    mmf_uvlp.plugin.register_components()
    paths = [DEFAULT_CONFIG_PATH]
    for mapping in ("builder_name_mapping", "model_name_mapping"):
        paths += [
            cls.config_path()
            for cls in registry.mapping[mapping].values()
            if cls.__module__.startswith("mmf_uvlp.")
        ]
    assert len(paths) > 10
    assert [path for path in paths if not os.path.isfile(path)] == []


# ----------------------------------------------------------------------------- run errors
@pytest.fixture
def main_trainer_module(monkeypatch):
    """mmf_uvlp.trainers.mmf_main_trainer over fakes of what it subclasses of MMF main: the
    training loop's ``_forward`` (a forward pass returning a report), ``configure_seed``, the
    Checkpoint's ``save_func`` and the data module (unused here); the registry's ``uvlp`` is
    restored afterwards."""
    import importlib

    from mmf.common.report import Report

    class MMFTrainer:
        def _forward(self, batch):
            return Report(batch, self.model(batch))

        def configure_seed(self):
            pass

        def configure_callbacks(self):  # MMF main's: early stopping keeps the checkpoint too
            self.checkpoint_callback = CheckpointCallback(self.config, self)
            self.early_stop_callback = types.SimpleNamespace(
                early_stopping=types.SimpleNamespace(checkpoint=self.checkpoint_callback.checkpoint)
            )

    class CheckpointCallback:
        def __init__(self, config, trainer):
            self._checkpoint = Checkpoint(trainer)

        @property
        def checkpoint(self):
            return self._checkpoint

    class Checkpoint:
        def __init__(self, trainer=None):
            self.trainer = trainer

        def save_func(self, *args):
            return torch.save(*args)

    for name, attribute, value in (
        ("mmf.trainers.mmf_trainer", "MMFTrainer", MMFTrainer),
        ("mmf.utils.checkpoint", "Checkpoint", Checkpoint),
        ("mmf.trainers.callbacks.checkpoint", "CheckpointCallback", CheckpointCallback),
        ("mmf.datasets.multi_datamodule", "MultiDataModule", object),
        ("mmf.datasets.multi_dataset_loader", "MultiDataLoader", object),
    ):
        module = types.ModuleType(name)
        setattr(module, attribute, value)
        monkeypatch.setitem(sys.modules, name, module)
    mapping = registry.mapping["trainer_name_mapping"]
    monkeypatch.setitem(mapping, "uvlp", mapping["uvlp"])
    for name in ("mmf_uvlp.trainers.mmf_main_trainer", "mmf_uvlp.trainers.mmf_main_loaders"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module("mmf_uvlp.trainers.mmf_main_trainer")


def test_the_main_trainer_stops_a_non_finite_loss_seeds_seed_zero_and_checkpoints(
    main_trainer_module,
):
    import compat_checks

    from mmf_uvlp.trainers.finite_loss import NonFiniteLossStop
    from mmf_uvlp.trainers.seeding import RandomState

    trainer = main_trainer_module.UVLPTrainer.__new__(main_trainer_module.UVLPTrainer)
    trainer.random_state, trainer.non_finite = RandomState(), NonFiniteLossStop()
    trainer.optimizer = None
    batch, trainer.model = compat_checks.nan_batch_and_model()
    trainer.num_updates = 6
    trainer.training_config = OmegaConf.create({"exit_on_nan_losses": True})
    compat_checks.expect_non_finite_loss_named(lambda: trainer._forward(batch), trainer)
    trainer.training_config.exit_on_nan_losses = False
    trainer._forward(batch)
    trainer.config = OmegaConf.create({"training": {"seed": 0}})
    draws = []
    for _ in range(2):
        trainer.configure_seed()  # MMF main's set_seed seeds nothing for 0
        draws.append(torch.rand(3))
    assert torch.equal(*draws)
    trainer.configure_callbacks()  # the callbacks write and restore through the plugin's
    assert isinstance(trainer.checkpoint_callback._checkpoint, main_trainer_module.UVLPCheckpoint)
    assert (
        trainer.early_stop_callback.early_stopping.checkpoint
        is trainer.checkpoint_callback._checkpoint
    )


def test_main_checkpoints_load_omegaconf_containers_and_refuse_code(tmp_path, monkeypatch):
    import compat_checks
    from mmf.utils.checkpoint import Checkpoint

    monkeypatch.setattr(Checkpoint, "_torch_load", Checkpoint._torch_load)  # restored afterwards
    main_fixes._plain_data_checkpoint_loads()
    loader = types.SimpleNamespace(device="cpu")
    betas = OmegaConf.create({"betas": [0.9, 0.999]}).betas  # MMF main's optimizer state holds it
    torch.save(
        {"model": {"w": torch.ones(2)}, "optimizer": {"param_groups": [{"betas": betas}]}},
        tmp_path / "current.ckpt",
    )
    loaded = Checkpoint._torch_load(loader, str(tmp_path / "current.ckpt"))
    assert list(loaded["optimizer"]["param_groups"][0]["betas"]) == [0.9, 0.999]
    crafted, ran = tmp_path / "crafted.ckpt", tmp_path / "ran"
    torch.save({"model": {}, "extra": compat_checks.RunsCode(str(ran))}, crafted)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(
        Exception, match=r"refused: it holds objects that are not plain data \(io\.open\)"
    ):
        Checkpoint._torch_load(loader, str(crafted))
    assert not ran.exists()


def test_main_checkpoint_writes_name_enospc_and_the_file(tmp_path, main_trainer_module):
    checkpoint = main_trainer_module.UVLPCheckpoint(None)
    target = tmp_path / "current.ckpt"
    target.symlink_to("/dev/full")
    with pytest.raises(Exception) as error:
        with open(target, "wb") as handle:  # MMF main's open_if_main, on rank 0
            checkpoint.save_func({"w": torch.zeros(1000)}, handle)
    assert str(error.value).startswith(
        f"cannot write checkpoint {target}: ENOSPC (No space left on device)"
    )
    with open(tmp_path / "fine.ckpt", "wb") as handle:
        checkpoint.save_func({"w": torch.zeros(3)}, handle)
    assert torch.load(tmp_path / "fine.ckpt", weights_only=True)["w"].shape == (3,)


# ---------------------------------------------------------------- Lightning's run length
LIGHTNING_DEFAULTS = {  # MMF main's defaults.yaml, the keys concerned
    "training": {
        "max_updates": 22000,
        "max_epochs": None,
        "evaluation_interval": 1000,
        "log_interval": 100,
        "update_frequency": 1,
    },
    "trainer": {
        "params": {
            "max_steps": 22000,
            "max_epochs": None,
            "val_check_interval": 1000,
            "log_every_n_steps": 100,
            "accumulate_grad_batches": 1,
        }
    },
}


def _lightning_run(training=None, params=None):
    config = OmegaConf.merge(
        LIGHTNING_DEFAULTS, {"training": training or {}, "trainer": {"params": params or {}}}
    )
    lightning_fixes.lightning_params_from_training(config, OmegaConf.create(LIGHTNING_DEFAULTS))
    return config


def test_lightning_follows_the_training_keys_the_user_wrote():
    config = _lightning_run({"max_updates": 8, "evaluation_interval": 4, "update_frequency": 2})
    params = config.trainer.params
    assert (params.max_steps, params.val_check_interval, params.accumulate_grad_batches) == (
        8,
        8,
        2,
    )
    assert params.check_val_every_n_epoch is None  # the interval spans epochs, as in MMF's trainer
    # a Lightning key the user wrote sets the training key the schedule and curriculum read
    config = _lightning_run(params={"max_steps": 50})
    assert (config.training.max_updates, config.trainer.params.max_steps) == (50, 50)


def test_lightning_and_training_keys_that_disagree_are_refused_in_one_line():
    from mmf_uvlp.errors import UserConfigError

    with pytest.raises(
        UserConfigError,
        match=r"^training.max_updates=8 and trainer.params.max_steps="
        r"50 disagree \(training.trainer=lightning follows trainer.params.max_steps\); "
        r"set only one of them$",
    ):
        _lightning_run({"max_updates": 8}, {"max_steps": 50})
