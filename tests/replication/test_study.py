"""The study definition and its commands (the reference models' too), and the demo chain
(the study's demo recipe)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mmf_uvlp.replication import runner
from mmf_uvlp.replication.archive import EARLIER
from mmf_uvlp.replication.recipe import load_recipe
from mmf_uvlp.replication.runner import prerequisites
from mmf_uvlp.replication.steps import (
    KINDS,
    METRICS,
    MMF_RUN,
    Settings,
    model_overrides,
    plan,
    system_steps,
)
from mmf_uvlp.replication.study import SYSTEMS, UVLA, config_datasets, config_model, select
from mmf_uvlp.tasks import TASKS
from mmf_uvlp.replication.world import World
from mmf_uvlp.reference_models import REFERENCE_MODELS
from mmf_uvlp.reference_models import SYSTEMS as REFERENCE_SYSTEMS

from helpers import REPO
from helpers.replication import TINY_MODELS, compose, replicate_tool


def _demo(data: Path, *options: str) -> list:
    """The steps of ``uvlp-replicate --recipe demo`` (``make demo``) with ``options``."""
    tool = replicate_tool()
    return tool.configure(
        tool.parse_args(["--recipe", "demo", "--data", str(data), *options])
    ).steps()


# ----------------------------------------------------------------------------- study and steps


def test_selection_follows_the_tables():
    tables, systems = select("1")
    assert [s.key for s in systems] == [
        "base",
        "u_visualbert",
        "random_pairs",
        "uvla",
        "aligned_vlp",
        "visual_bert",
        "vilbert",
        "vl_bert",
    ]
    assert [label for label, _ in tables[0].rows][5:] == ["VisualBERT", "ViLBERT", "VL-BERT"]
    tables, systems = select(None, "uvla,base")
    assert [t.key for t in tables] == ["1", "2", "4", "mix", "paper", "links", "budget"]
    assert [s.key for s in systems] == ["base", "uvla"]
    tables, systems = select(None, "vl_bert,base")  # the reference models are Table 1's only
    assert [t.key for t in tables] == ["1"]
    assert [s.key for s in systems] == ["base", "vl_bert"]
    assert all(SYSTEMS[key].model is REFERENCE_SYSTEMS[key] for key in REFERENCE_MODELS)
    assert all(s.model is UVLA for s in SYSTEMS.values() if s.key not in REFERENCE_MODELS)
    with pytest.raises(ValueError, match=r"--tables: unknown \['7'\]"):
        select("1,7")
    with pytest.raises(ValueError, match=r"--systems: unknown \['uvla2'\]"):
        select(None, "uvla2")
    with pytest.raises(ValueError, match=r"\['topk1'\] are in none of the tables \['1'\]"):
        select("1", "topk1")


def test_every_system_config_exists_and_trains_on_its_data():
    for system in SYSTEMS.values():
        if system.config is not None:
            assert config_datasets(system.config), system.key
            # the proof of a finished pre-training is the file MMF writes: <model>_final.pth
            assert f"{config_model(system.config)}_final.pth" == system.model.final_weights
        for task in TASKS:
            assert (REPO / system.model.finetune(task)).is_file(), (system.key, task)
    assert config_datasets(SYSTEMS["visual_bert"].config) == ["masked_aligned_vlp"]
    assert config_datasets(SYSTEMS["vl_bert"].config) == ["aligned_vlp", "u_visualbert_text"]
    assert config_model(SYSTEMS["visual_bert"].model.finetune("vqa2")) == "visual_bert"
    with pytest.raises(ValueError, match=r"toy_world/vqa2\.yaml: no model: key"):
        config_model("configs/datasets/toy_world/vqa2.yaml")
    assert config_datasets(SYSTEMS["u_visualbert"].config) == [
        "u_visualbert_text",
        "u_visualbert_image",
    ]
    assert config_datasets(SYSTEMS["topk10"].config) == [
        "uvla_region_tag",
        "uvla_region_phrase",
        "uvla_image_sentence",
    ]
    # Table 5: round-robin reads the caption corpus, the text the joint run draws from.
    import yaml

    joint = yaml.safe_load((REPO / SYSTEMS["true_pairs_0"].config).read_text())
    round_robin = yaml.safe_load((REPO / SYSTEMS["round_robin"].config).read_text())
    text = round_robin["dataset_config"]["u_visualbert_text"]["annotations"]["train"]
    assert (
        text == joint["dataset_config"]["random_pairs"]["sentences"] == ["text/caption_corpus.txt"]
    )


def test_the_paper_settings_row_is_the_three_ablations_together():
    """μ-VLA with the paper's settings: K = 5 of the K = 10 corpus (topk5), R-T / R-N / I-S
    drawn equally (equal_mix), the curriculum from m = 0.05 (curriculum_early); each of
    those changes only its own keys of the calibrated μ-VLA."""
    from mmf.utils.configuration import load_yaml
    from omegaconf import OmegaConf

    def config(key: str) -> dict:
        return OmegaConf.to_container(load_yaml(str(REPO / SYSTEMS[key].config)))

    paper, calibrated = config("uvla_paper"), config("uvla")
    topk5, equal_mix, early = config("topk5"), config("equal_mix"), config("curriculum_early")
    datasets = ("uvla_region_phrase", "uvla_image_sentence")
    assert [calibrated["dataset_config"][name]["top_k"] for name in datasets] == [2, 2]
    assert [paper["dataset_config"][name]["top_k"] for name in datasets] == [5, 5]
    assert paper["dataset_config"] == topk5["dataset_config"]
    assert SYSTEMS["uvla_paper"].corpus == SYSTEMS["topk5"].corpus == "corpus_k10"
    assert calibrated["multitasking"]["type"] == "size_proportional"
    assert (
        paper["multitasking"]
        == equal_mix["multitasking"]
        == {
            "enabled": True,
            "type": "ratios",
            "params": {
                "sampling_ratios": {name: 1 for name in config_datasets(SYSTEMS["uvla"].config)}
            },
        }
    )
    assert calibrated["model_config"]["uvla"]["curriculum"]["start_epoch"] == 0.5
    assert early["model_config"]["uvla"]["curriculum"]["start_epoch"] == 0.05
    assert paper["model_config"] == early["model_config"]
    # each writes a folder of its own (save/<experiment name>/), nothing else differs
    for system in (paper, early, calibrated):
        system["training"].pop("experiment_name")
    for key in set(calibrated) - {"dataset_config", "multitasking", "model_config"}:
        assert paper[key] == calibrated[key], key
    assert {k: v for k, v in early.items() if k != "model_config"} == {
        k: v for k, v in calibrated.items() if k != "model_config"
    }


def test_the_commands_of_a_study(tmp_path):
    world = World(tmp_path / "toy_world_tiny", "tiny")
    settings = Settings(
        world,
        tmp_path / "runs",
        seeds=(0, 1),
        pretrain_updates=40,
        finetune_updates=12,
        model_overrides=("model_config.uvla.x=1",),
    )
    steps = plan([SYSTEMS["base"], SYSTEMS["uvla"], SYSTEMS["rt"], SYSTEMS["topk1"]], settings)
    kinds = [s.kind for s in steps]
    assert set(kinds) == set(KINDS)
    assert kinds[:3] == ["world", "corpus", "corpus"]
    assert [s.folder.name for s in steps[1:3]] == ["corpus", "corpus_k10"]  # each corpus once
    assert "--k" in steps[2].command and "10" in steps[2].command
    # Base: 4 fine-tunings + the splits; the others also pre-train; per seed.
    assert kinds.count("pretrain") == 3 * 2 and kinds.count("finetune") == 4 * 4 * 2
    assert kinds.count("evaluate") == 4 * 2
    for step in steps[3:]:
        assert step.command[0] == MMF_RUN and "model_config.uvla.x=1" in step.command
        assert f"env.data_dir={world.path}" in step.command
        assert "model_config.uvla.feature_dim=64" in step.command
        if step.kind != "evaluate":
            assert f"training.seed={step.seed}" in step.command  # pre-training and fine-tuning
            assert "checkpoint.resume=True" in step.command
    base_vqa = next(s for s in steps if s.system == "base" and s.task == "vqa2" and s.seed == 1)
    assert "model_config.uvla.pretrained_checkpoint=None" in base_vqa.command
    assert "training.max_updates=12" in base_vqa.command
    uvla = [s for s in steps if s.system == "uvla" and s.seed == 1]
    assert uvla[0].kind == "pretrain" and "config=projects/uvla/pretrain.yaml" in uvla[0].command
    assert "training.max_updates=40" in uvla[0].command
    assert "dataset_config.uvla_region_phrase.holdout_every=6" in uvla[0].command  # tiny world
    assert (
        f"model_config.uvla.pretrained_checkpoint={uvla[0].folder / 'uvla_final.pth'}"
        in uvla[1].command
    )
    assert all(
        f"config=projects/uvla/finetune/{t}.yaml" in s.command for t, s in zip(TASKS, uvla[1:5])
    )
    splits = uvla[5]
    assert f"checkpoint.resume_file={uvla[4].folder / 'current.ckpt'}" in splits.command
    assert "datasets=refcoco_plus_val,refcoco_plus_testA,refcoco_plus_testB" in splits.command
    assert uvla[4].folder / "current.ckpt" not in uvla[4].prune  # the splits read it
    assert splits.prune == (uvla[4].folder / "current.ckpt",)


def _tiny_overrides() -> tuple[str, ...]:
    return tuple(option for path in TINY_MODELS for option in model_overrides(path))


@pytest.mark.parametrize("key", REFERENCE_MODELS)
def test_the_commands_of_a_reference_model_system(tmp_path, key):
    """Its own pre-training and fine-tuning configs, fine-tuning from its own final weights,
    split inference on the fine-tuned checkpoint, its feature size key and only its own
    section of the model overrides; the same schedule and seeds as the uvla systems."""
    seed_system = REFERENCE_SYSTEMS[key]
    world = World(tmp_path / "toy_world_tiny", "tiny")
    settings = Settings(
        world,
        tmp_path / "runs",
        seeds=(0, 1),
        pretrain_updates=40,
        finetune_updates=12,
        model_overrides=_tiny_overrides(),
    )
    steps = system_steps(SYSTEMS[key], 1, settings)
    uvla = system_steps(SYSTEMS["aligned_vlp"], 1, settings)
    assert (
        [s.kind for s in steps]
        == [s.kind for s in uvla]
        == ["pretrain", "finetune", "finetune", "finetune", "finetune", "evaluate"]
    )
    own = [
        o
        for o in settings.model_overrides
        if o.startswith(f"model_config.{seed_system.model_section}.")
    ]
    assert own and len(own) < len(settings.model_overrides)
    for step, reference in zip(steps, uvla):
        assert step.command[0] == MMF_RUN and step.seed == 1 and step.system == key
        assert f"env.data_dir={world.path}" in step.command
        assert f"{seed_system.feature_dim_key}=64" in step.command
        assert step.command[-len(own) :] == tuple(own)  # its section, no other model's
        assert not any(a.startswith("model_config.uvla.") for a in step.command)
        schedule = [a for a in reference.command if a.startswith(("training.", "scheduler."))]
        assert schedule == [a for a in step.command if a.startswith(("training.", "scheduler."))]
    pretrain, finetunes, splits = steps[0], steps[1:5], steps[5]
    weights = pretrain.folder / seed_system.final_weights
    assert pretrain.folder == tmp_path / "runs" / key / "seed1" / "pretrain"
    assert f"config={seed_system.pretrain_config}" in pretrain.command
    assert f"env.save_dir={pretrain.folder}" in pretrain.command
    assert pretrain.proof_file == weights and pretrain.proof_keys == ()
    assert weights not in pretrain.prune and pretrain.folder / "current.ckpt" in pretrain.prune
    for name in config_datasets(seed_system.pretrain_config):  # tiny world: holdout
        assert f"dataset_config.{name}.holdout_every=6" in pretrain.command
    for task, step in zip(TASKS, finetunes):
        assert step.task == task
        assert f"config={seed_system.finetune(task)}" in step.command
        assert all(a in step.command for a in seed_system.start_from(weights))
        assert "run_type=train_inference" in step.command
        assert step.proof_keys == (f"test/{task}/{METRICS[task]}",)
        final = step.folder / f"{config_model(seed_system.finetune(task))}_final.pth"
        assert final in step.prune and step.folder / "models" in step.prune
        assert (step.folder / "current.ckpt" in step.prune) == (task != "refcoco_plus")
    checkpoint = finetunes[3].folder / "current.ckpt"
    assert f"config={seed_system.finetune('refcoco_plus')}" in splits.command
    assert all(a in splits.command for a in seed_system.evaluate_from(checkpoint))
    assert "run_type=inference" in splits.command
    assert "datasets=refcoco_plus_val,refcoco_plus_testA,refcoco_plus_testB" in splits.command
    assert splits.needs == checkpoint and splits.prune == (checkpoint,)
    assert splits.proof_keys == tuple(
        f"test/refcoco_plus_{view}/refcoco_accuracy" for view in ("val", "testA", "testB")
    )


def test_how_the_reference_models_load_their_weights(tmp_path):
    settings = Settings(World(tmp_path / "w"), tmp_path / "runs", seeds=(0,))
    visual_bert, vl_bert = (
        system_steps(SYSTEMS[key], 0, settings) for key in ("visual_bert", "vl_bert")
    )
    weights = tmp_path / "runs/visual_bert/seed0/pretrain/visual_bert_uvlp_final.pth"
    assert visual_bert[0].proof_file == weights
    assert (
        visual_bert[1].command[
            visual_bert[1].command.index(f"checkpoint.resume_file={weights}") + 1
        ]
        == "checkpoint.resume_pretrained=True"
    )
    assert "config=projects/baselines/visual_bert/vqa2.yaml" in visual_bert[1].command
    # MMF's visual_bert fine-tunes VQA2 (visual_bert_final.pth), visual_bert_uvlp RefCOCO+
    assert visual_bert[1].folder / "visual_bert_final.pth" in visual_bert[1].prune
    assert visual_bert[4].folder / "visual_bert_uvlp_final.pth" in visual_bert[4].prune
    assert not any(
        a.startswith("model_config.visual_bert.pretrained") for s in visual_bert for a in s.command
    )
    weights = tmp_path / "runs/vl_bert/seed0/pretrain/vl_bert_final.pth"
    assert f"model_config.vl_bert.pretrained_checkpoint={weights}" in vl_bert[2].command
    assert "model_config.vl_bert.pretrained_checkpoint=None" in vl_bert[5].command
    checkpoint = tmp_path / "runs/vl_bert/seed0/refcoco_plus/current.ckpt"
    assert f"checkpoint.resume_file={checkpoint}" in vl_bert[5].command
    # a world without world.json and preset: the configs' own feature size
    assert not any("feature_dim" in a for s in vl_bert for a in s.command)


@pytest.mark.parametrize("key", REFERENCE_MODELS)
def test_mmf_takes_a_reference_models_commands_with_the_tiny_overrides(tmp_path, key):
    """Every key of the tiny model files exists in MMF's config of that model (MMF refuses
    command-line keys its config lacks) and reaches the model each command builds."""
    settings = Settings(
        World(tmp_path / "toy_world_tiny", "tiny"),
        tmp_path / "runs",
        seeds=(0,),
        tasks=("vqa2", "refcoco_plus"),
        model_overrides=_tiny_overrides(),
    )
    for step in system_steps(SYSTEMS[key], 0, settings):
        config = compose(step.command)
        node = config.model_config[config.model]
        hidden = node.bert_config.hidden_size if key == "vl_bert" else node.hidden_size
        assert hidden == 32, step.title
        assert node.bert_model_name is None, step.title


def test_demo_chain_pretrains_uvla_and_aligned_vlp_and_fine_tunes_three_rows(tmp_path):
    """make demo: the world, the study's corpus, μ-VLA and Aligned VLP pre-training, then
    each of Base, μ-VLA and Aligned VLP fine-tuned on the four tasks from its own weights,
    each fine-tuning after its system's pre-training only; one seed, Table 1."""
    steps = _demo(tmp_path, "--pretrain-updates", "4", "--finetune-updates", "2")
    world = World((tmp_path / "toy_world_demo").resolve(), "demo")
    assert [s.kind for s in steps[:2]] == ["world", "corpus"]
    assert list(steps[0].command) == world.generate_command(0)
    assert list(steps[1].command) == world.corpus_command("corpus")
    weights = {s.system: s.proof_file for s in steps if s.kind == "pretrain"}
    runs = (tmp_path / "replication" / "toy_world_demo__demo").resolve()
    assert weights == {
        "uvla": runs / "uvla/seed0/pretrain/uvla_final.pth",
        "aligned_vlp": runs / "aligned_vlp/seed0/pretrain/uvla_final.pth",
    }
    assert {s.seed for s in steps if s.system} == {0}
    # the fine-tuning configs look for the μ-VLA weights by default where the pre-training
    # config writes them (the Quick start); the demo names its own
    defaults = yaml.safe_load((REPO / "projects/uvla/finetune/defaults.yaml").read_text())
    pretraining = yaml.safe_load((REPO / "projects/uvla/pretrain.yaml").read_text())
    assert pretraining["env"]["save_dir"] == "./save/${training.experiment_name}"
    assert (
        defaults["model_config"]["uvla"]["pretrained_checkpoint"]
        == f"save/{pretraining['training']['experiment_name']}/uvla_final.pth"
    )
    finetunes = [s for s in steps if s.kind == "finetune"]
    assert sorted((s.system, s.task) for s in finetunes) == sorted(
        (system, task) for system in ("base", "uvla", "aligned_vlp") for task in TASKS
    )
    for step in finetunes:
        start = f"model_config.uvla.pretrained_checkpoint={weights.get(step.system)}"
        assert start in step.command, step.title
        assert "training.max_updates=2" in step.command, step.title
    needs = prerequisites(steps)
    for i, step in enumerate(steps):
        if step.kind == "finetune":
            waits = {steps[j].system for j in needs[i] if steps[j].kind == "pretrain"}
            assert waits == ({step.system} if step.system in weights else set()), step.title
    assert [s.system for s in steps if s.kind == "evaluate"] == ["base", "uvla", "aligned_vlp"]
    updates = {a for s in steps if s.kind == "pretrain" for a in s.command if "max_updates" in a}
    assert updates == {"training.max_updates=4"}
    tool = replicate_tool()
    study = tool.configure(tool.parse_args(["--recipe", "demo", "--data", str(tmp_path)]))
    assert [t.key for t in study.tables] == ["1"] and study.settings.seeds == (0,)
    assert (study.settings.pretrain_updates, study.settings.finetune_updates) == (400, 120)


def test_demo_fine_tunes_with_its_recipe_s_options(tmp_path):
    """make demo's fine-tunings take configs/study/demo.yaml's options: lr 3e-4 (VE and
    NLVR2 1e-4, after it, so MMF keeps theirs), softmax VQA, the pooled heads on the mean;
    another model's model_config options stay out of uvla's commands."""
    recipe = load_recipe(REPO / "configs/study/demo.yaml", TASKS)
    assert (recipe.world, recipe.pretrain_updates, recipe.finetune_updates) == ("demo", 400, 120)
    assert (recipe.tables, recipe.systems, recipe.seeds) == ("1", "base,uvla,aligned_vlp", 1)
    assert load_recipe("demo", TASKS) == recipe  # a recipe of configs/study/ by its name
    steps = {(s.system, s.task): s.command for s in _demo(tmp_path) if s.kind == "finetune"}
    softmax = "model_config.uvla.losses=[{'type':'softmax_kldiv'}]"
    for system in ("base", "uvla", "aligned_vlp"):
        vqa, nlvr2, ve, refcoco = (list(steps[system, task]) for task in TASKS)
        assert softmax in vqa and "model_config.uvla.pooling=mean" in vqa
        for command in (nlvr2, ve):
            assert "model_config.uvla.pooling=mean" in command
            lrs = [a for a in command if a.startswith("optimizer.params.lr=")]
            assert lrs == ["optimizer.params.lr=3e-4", "optimizer.params.lr=1e-4"]
        assert [a for a in refcoco if a.startswith("optimizer.")] == ["optimizer.params.lr=3e-4"]
        assert not any("pooling" in a or "softmax" in a for a in refcoco)
        assert not any(a.startswith("model_config.vl_bert.") for c in (vqa, nlvr2, ve) for a in c)


def test_side_by_side_runs_share_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 8)
    runner.share_cores(1)  # pinned for one job too: the count is part of a run's identity
    assert runner.os.environ["OMP_NUM_THREADS"] == "8" and runner.threads() == 8
    monkeypatch.delenv("OMP_NUM_THREADS")
    runner.share_cores(3)
    assert runner.os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # a user's setting wins
    runner.share_cores(2)
    assert runner.os.environ["OMP_NUM_THREADS"] == "5"
    monkeypatch.delenv("OMP_NUM_THREADS")
    runner.share_cores(16)  # never fewer than one thread
    assert runner.os.environ["OMP_NUM_THREADS"] == "1"


def test_make_demo_and_its_parts_run_the_study_runner(tmp_path):
    """make demo, corpus, pretrain, finetune and report are calls of uvlp-replicate with the
    demo recipe (a part of the chain: --steps; report: --recorded); make demo then prints the
    calibrated study's Table 1 from its recorded runs, trained by nobody in this call, read
    from the committed archive."""
    tool = replicate_tool()
    dry = {}
    for target in ("demo", "corpus", "pretrain", "finetune", "report"):
        printed = subprocess.run(
            ["make", "-n", "--no-print-directory", target, "VENV=.venv", f"DATA={tmp_path}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert printed.returncode == 0, printed.stderr
        dry[target] = [
            shlex.split(line)
            for line in printed.stdout.splitlines()
            if "mmf_uvlp.cli.replicate" in line
        ]
    for target, lines in dry.items():
        assert lines and all(line[1:3] == ["-m", "mmf_uvlp.cli.replicate"] for line in lines)
        args = tool.parse_args(lines[0][3:])
        assert args.recipe == "demo" and args.data == tmp_path, target
    kinds = {target: tool.parse_args(lines[0][3:]).steps for target, lines in dry.items()}
    assert kinds == {
        "demo": None,
        "corpus": ("world", "corpus"),
        "pretrain": ("world", "corpus", "pretrain"),
        "finetune": ("world", "corpus", "pretrain", "finetune", "evaluate"),
        "report": None,
    }
    assert tool.parse_args(dry["report"][0][3:]).recorded
    assert tool.parse_args(dry["demo"][0][3:]).jobs == 2
    _, calibrated = dry["demo"]
    args = tool.parse_args(calibrated[3:])
    assert args.recorded and not args.plan
    assert args.recipe == "calibrated"
    assert args.archive == Path("results/archive/calibrated") and (REPO / args.archive).is_dir()
    assert args.systems == "base,u_visualbert,random_pairs,uvla,aligned_vlp"
    assert args.tables == "1" and args.seeds == 3
    assert args.data == tmp_path


def test_steps_runs_a_part_of_the_chain_and_refuses_unknown_kinds(tmp_path, capsys):
    tool = replicate_tool()
    with pytest.raises(SystemExit):
        tool.parse_args(["--steps", "world,training"])
    assert "unknown steps ['training']" in capsys.readouterr().err
    assert (
        tool.main(["--recipe", "demo", "--data", str(tmp_path), "--steps", "world", "--plan"]) == 2
    )
    assert "--steps: not with --recorded or --plan" in capsys.readouterr().err


def test_the_committed_calibrated_archive_matches_the_recipe(tmp_path, capsys):
    """Every run in results/archive/calibrated was made by the command the calibrated recipe
    plans now: a change to the recipe or to a config it reads shows here, not as a table
    that mixes settings."""
    archive = tmp_path / "archive"
    shutil.copytree(REPO / "results" / "archive" / "calibrated", archive)
    # step.json of each run and setup/*.json; not the runs a run made again superseded
    records = len([path for path in archive.rglob("*.json") if EARLIER not in path.name])
    systems = sorted(d.name for d in archive.iterdir() if d.is_dir() and d.name != "setup")
    assert {"base", "uvla", "aligned_vlp"} <= set(systems)
    assert (
        replicate_tool().main(
            [
                "--recipe",
                "configs/study/calibrated.yaml",
                "--systems",
                ",".join(systems),
                "--data",
                str(tmp_path),
                "--archive",
                str(archive),
                "--plan",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "stale" not in printed
    assert f"{records} finished steps restored" in printed  # each record is a planned step


def test_corpus_command_is_the_same_before_and_after_the_world_is_generated(tmp_path):
    """The study plans its steps before it generates a preset world: the corpus command must
    not change once the world exists, or a resumed study refuses its own finished corpus."""
    world = World(tmp_path / "toy_world_demo", "demo")
    planned = world.corpus_command("corpus")
    (world.path / "images_gt").mkdir(parents=True)
    (world.path / "images_gt/cc.jsonl").write_text("")
    assert world.corpus_command("corpus") == planned
    assert "--objects-gt" in planned


def test_a_toy_world_named_by_its_folder_plans_the_corpus_of_its_preset(tmp_path):
    """A folder holding only a toy world's world.json (`--world <folder>`, as the published
    tables are rebuilt without the world's data) plans the corpus command the archive's
    records hold, so a finished corpus is not refused as another command's."""
    folder = tmp_path / "toy_world_calibrated"
    folder.mkdir()
    (folder / "world.json").write_text(json.dumps({"preset": "calibrated"}))
    command = World.resolve(str(folder), tmp_path).corpus_command("corpus")
    assert command[command.index("--objects-gt") + 1] == str(folder / "images_gt/cc.jsonl")
    (folder / "world.json").unlink()  # data of the user's own: no objects file, no option
    assert "--objects-gt" not in World.resolve(str(folder), tmp_path).corpus_command("corpus")
