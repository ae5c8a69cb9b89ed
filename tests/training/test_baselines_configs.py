"""The baselines' run configs as MMF composes them: same model, optimizer and budget as
μ-VLA's projects/uvla/pretrain.yaml; each system's data and heads."""

from __future__ import annotations

import argparse

import pytest
from omegaconf import OmegaConf

from mmf.common.registry import registry

from helpers import REPO


RATIOS = (0, 20, 40, 60, 80, 100)
VISUAL_LOSSES = ["uvla_mlm", "uvla_mrc", "uvla_mrfr"]
SYSTEMS = {  # config -> (datasets, heads, losses)
    "baselines/aligned_vlp/pretrain.yaml": (
        ["aligned_vlp"],
        ["mlm", "mrc", "mrfr", "itm"],
        VISUAL_LOSSES + ["uvla_itm"],
    ),
    "baselines/u_visualbert/pretrain.yaml": (
        ["u_visualbert_text", "u_visualbert_image"],
        ["mlm", "mrc", "mrfr"],
        VISUAL_LOSSES,
    ),
    "baselines/round_robin/pretrain.yaml": (
        ["u_visualbert_text", "u_visualbert_image"],
        ["mlm", "mrc", "mrfr"],
        VISUAL_LOSSES,
    ),
    "baselines/random_pairs/pretrain.yaml": (
        ["random_pairs"],
        ["mlm", "mrc", "mrfr"],
        VISUAL_LOSSES,
    ),
    "baselines/uvla_bc/random_pairs.yaml": (
        ["random_pairs"],
        ["mlm", "mrc", "mrfr"],
        VISUAL_LOSSES,
    ),
    **{
        f"baselines/paired_ratio/true_pairs_{r}.yaml": (
            ["random_pairs"],
            ["mlm", "mrc", "mrfr"],
            VISUAL_LOSSES,
        )
        for r in RATIOS
    },
    **{f"uvla/ablations/topk{k}.yaml": (None, None, None) for k in (1, 5, 10)},
    "uvla/ablations/equal_mix.yaml": (None, None, None),
    "baselines/uvla_bc/pretrain.yaml": (None, None, None),  # None: μ-VLA's own
}
UVLA_DATASETS = ["uvla_region_tag", "uvla_region_phrase", "uvla_image_sentence"]


def _load(config: str):
    """MMF's full configuration of ``projects/<config>``, composed as ``mmf_run`` does."""
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    previous = registry.get("config", no_warning=True)
    setup_imports()
    registry.register("config", None)  # MMF reads its defaults while no config is registered
    try:
        args = argparse.Namespace(
            config_override=None, opts=[f"config={REPO / 'projects' / config}"]
        )
        return Configuration(args).get_config()
    finally:
        registry.register("config", previous)


@pytest.fixture(scope="module")
def uvla():
    return _load("uvla/pretrain.yaml")


@pytest.mark.parametrize("config", sorted(SYSTEMS))
def test_same_model_optimizer_and_budget_as_uvla(config, uvla):
    loaded = _load(config)
    assert loaded.training.lr_scheduler is True and loaded.scheduler.type == "warmup_linear"
    for key in ("optimizer", "scheduler"):
        assert OmegaConf.to_container(loaded[key], resolve=True) == OmegaConf.to_container(
            uvla[key], resolve=True
        ), key
    for key in ("batch_size", "max_updates", "seed"):
        assert loaded.training[key] == uvla.training[key], key
    assert loaded.env.data_dir == uvla.env.data_dir
    for key in ("bert_model_name", "bert_layers", "feature_dim", "num_region_classes"):
        assert loaded.model_config.uvla[key] == uvla.model_config.uvla[key], key
    datasets, heads, losses = SYSTEMS[config]
    if datasets is None:
        datasets, heads = UVLA_DATASETS, list(uvla.model_config.uvla.heads)
        losses = [loss.type for loss in uvla.model_config.uvla.losses]
        assert loaded.model_config.uvla.curriculum.enabled is True
    else:
        assert loaded.model_config.uvla.curriculum.enabled is False
    assert loaded.datasets.split(",") == datasets
    assert list(loaded.model_config.uvla.heads) == heads
    assert [loss.type for loss in loaded.model_config.uvla.losses] == losses
    for name in datasets:  # the demo's sizes
        data = loaded.dataset_config[name]
        assert data.processors.masking_processor.params.max_seq_length == 24
        if data.use_features:
            assert data.max_features == data.processors.masking_processor.params.max_regions == 24


def test_u_visualbert_reads_text_only_batches_in_proportion():
    loaded = _load("baselines/u_visualbert/pretrain.yaml")
    assert loaded.model_config.uvla.text_only_batches is True
    assert loaded.training.dataset_size_proportional_sampling is True
    text = loaded.dataset_config.u_visualbert_text
    assert list(text.annotations.train) == ["text/caption_corpus.txt,text/narrative_corpus.txt"]
    assert (
        loaded.dataset_config.u_visualbert_image.processors.masking_processor.type
        == "uvla_image_tag_masking"
    )


def test_round_robin_reads_the_caption_corpus_and_regions_alone():
    """Table 5's round-robin row: the joint row's text (the caption corpus), image batches
    with no tags."""
    loaded = _load("baselines/round_robin/pretrain.yaml")
    assert loaded.model_config.uvla.text_only_batches is True
    assert list(loaded.dataset_config.u_visualbert_text.annotations.train) == [
        "text/caption_corpus.txt"
    ]
    assert (
        loaded.dataset_config.u_visualbert_image.processors.masking_processor.type
        == "uvla_image_masking"
    )
    joint = _load("baselines/paired_ratio/true_pairs_0.yaml").dataset_config.random_pairs
    assert list(joint.sentences) == ["text/caption_corpus.txt"]


@pytest.mark.parametrize("ratio", RATIOS)
def test_paired_ratio_configs(ratio):
    pairs = _load(f"baselines/paired_ratio/true_pairs_{ratio}.yaml").dataset_config.random_pairs
    assert pairs.true_pair_ratio == pytest.approx(ratio / 100)
    assert list(pairs.sentences) == ["text/caption_corpus.txt"]
    assert pairs.captions == "text/captions_gt.tsv" and pairs.pairing_seed == 0


def test_random_pairs_draw_from_the_text_of_their_comparison():
    table1 = _load("baselines/random_pairs/pretrain.yaml").dataset_config.random_pairs
    assert table1.true_pair_ratio == 0
    assert list(table1.sentences) == ["text/caption_corpus.txt", "text/narrative_corpus.txt"]
    bc = _load("baselines/uvla_bc/random_pairs.yaml").dataset_config.random_pairs
    assert bc.true_pair_ratio == 0 and list(bc.sentences) == ["text/narrative_corpus.txt"]


def test_uvla_bc_and_top_k_read_their_own_corpus():
    bc = _load("baselines/uvla_bc/pretrain.yaml").dataset_config
    assert all(
        list(bc[name].annotations[t]) == ["corpus_bc"]
        for name in UVLA_DATASETS
        for t in ("train", "val", "test")
    )
    for k in (1, 5, 10):
        topk = _load(f"uvla/ablations/topk{k}.yaml").dataset_config
        assert all(list(topk[name].annotations.train) == ["corpus_k10"] for name in UVLA_DATASETS)
        assert topk.uvla_region_phrase.top_k == topk.uvla_image_sentence.top_k == k


def test_equal_mix_draws_each_granularity_a_third_of_the_time(uvla):
    assert OmegaConf.to_container(uvla.multitasking) == {
        "enabled": True,
        "type": "size_proportional",
        "params": {},
    }
    mix = _load("uvla/ablations/equal_mix.yaml").multitasking
    assert mix.type == "ratios" and dict(mix.params.sampling_ratios) == dict.fromkeys(
        UVLA_DATASETS, 1
    )


RUN_CONFIGS = sorted(
    str(path.relative_to(REPO / "projects"))
    for path in (REPO / "projects").rglob("*.yaml")
    if "defaults" not in path.name and path.name != "toy_world.yaml"
)


def test_every_run_config_saves_into_a_folder_of_its_own():
    """Run after run into ./save cannot overwrite one another: each run config's save folder
    is save/<its experiment name>, and no two configs share one."""
    folders = {}
    for config in RUN_CONFIGS:
        loaded = _load(config)
        name = loaded.training.experiment_name
        assert loaded.env.save_dir == f"./save/{name}", (config, loaded.env.save_dir)
        folders.setdefault(name, []).append(config)
    shared = {name: configs for name, configs in folders.items() if len(configs) > 1}
    assert not shared, shared
    assert len(folders) == len(RUN_CONFIGS) == 49
