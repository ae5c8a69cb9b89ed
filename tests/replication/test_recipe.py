"""A study's recipe and model config: the world, schedules and options they set, reaching the
planned commands; errors naming the file and key."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from mmf_uvlp.replication import recipe as recipe_format
from mmf_uvlp.replication.recipe import load_recipe
from mmf_uvlp.replication.steps import Settings, model_overrides, system_steps
from mmf_uvlp.replication.study import SYSTEMS
from mmf_uvlp.tasks import TASKS
from mmf_uvlp.replication.world import World

from helpers import REPO
from helpers.replication import compose, replicate_tool


def test_model_config_becomes_command_line_overrides():
    assert model_overrides("configs/models/uvla/tiny_random.yaml") == (
        "model_config.uvla.bert_model_name=None",
        "model_config.uvla.bert_config.hidden_size=32",
        "model_config.uvla.bert_config.num_hidden_layers=1",
        "model_config.uvla.bert_config.num_attention_heads=2",
        "model_config.uvla.bert_config.intermediate_size=64",
    )
    vilbert = model_overrides("configs/models/vilbert/tiny_random.yaml")
    assert vilbert[-2:] == (
        "model_config.vilbert.t_biattention_id=[1]",
        "model_config.vilbert.v_biattention_id=[0]",
    )  # list literals


def test_model_config_errors_name_the_file_and_key(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text("model_config:\n  uvla: {bert_model_name: null}\n  mmbt: {x: 1}\n")
    with pytest.raises(
        ValueError,
        match=r"model\.yaml: model_config sections \['mmbt'\] belong "
        r"to no model of the study; expected sections from "
        r"\['uvla', 'vilbert', 'visual_bert', 'vl_bert'\]",
    ):
        model_overrides(path)
    path.write_text("model_config:\n  vl_bert:\n    heads: [{a: 1}]\n")
    with pytest.raises(ValueError, match=r"model_config\.vl_bert\.heads: only scalar values"):
        model_overrides(path)
    path.write_text("model: uvla\n")
    with pytest.raises(ValueError, match="expected a yaml with a model_config mapping"):
        model_overrides(path)


def test_a_recipe_sets_the_world_schedules_and_per_task_options(tmp_path):
    recipe = load_recipe(REPO / "configs/study/calibrated.yaml", TASKS)
    assert recipe.world == "calibrated" and recipe.pretrain_updates == 5000
    world = World.resolve(recipe.world, tmp_path)  # a preset: generated when missing
    assert world.path == tmp_path / "toy_world_calibrated" and world.feature_dim == 128
    settings = Settings(
        World(tmp_path / "w"),
        tmp_path / "runs",
        seeds=(0,),
        pretrain_updates=recipe.pretrain_updates,
        finetune_updates=recipe.finetune_updates,
        pretrain_options=recipe.pretrain_options,
        finetune_options=recipe.finetune_options,
        task_options=recipe.task_options,
    )
    kldiv = "model_config.uvla.losses=[{'type':'softmax_kldiv'}]"
    aligned = system_steps(SYSTEMS["aligned_vlp"], 0, settings)
    pretrain, vqa, nlvr2 = aligned[:3]
    entailment = next(step for step in aligned if step.task == "visual_entailment")
    referring = [step for step in aligned if step.task.startswith("refcoco_plus")]
    assert "optimizer.params.lr=3e-4" in pretrain.command and kldiv not in pretrain.command
    mean = "model_config.uvla.pooling=mean"
    assert all(mean in step.command for step in (pretrain, vqa, nlvr2, entailment))
    assert len(referring) == 2 and not any(mean in step.command for step in referring)
    assert not any("vl_bert" in option for option in entailment.command)
    assert "training.max_updates=5000" in pretrain.command
    assert "optimizer.params.lr=3e-4" in vqa.command and kldiv in vqa.command
    assert kldiv not in nlvr2.command and "training.max_updates=1500" in nlvr2.command
    # the recipe's lr comes after the schedule's options; a model_config option reaches only
    # its own model's runs
    assert vqa.command.index("optimizer.params.lr=3e-4") > vqa.command.index(
        "checkpoint.resume=True"
    )
    visual_bert_vqa = system_steps(SYSTEMS["visual_bert"], 0, settings)[1]
    assert "optimizer.params.lr=3e-4" in visual_bert_vqa.command
    vl_bert_entailment = next(
        step
        for step in system_steps(SYSTEMS["vl_bert"], 0, settings)
        if step.task == "visual_entailment"
    )
    assert "model_config.vl_bert.pooling=mean" in vl_bert_entailment.command
    assert mean not in vl_bert_entailment.command
    assert kldiv not in visual_bert_vqa.command
    assert compose(vqa.command).model_config.uvla.losses[0].type == "softmax_kldiv"
    # NLVR2 and VE fine-tune at the task's own lr (it comes after the shared one and wins)
    assert [compose(step.command).optimizer.params.lr for step in (vqa, nlvr2, entailment)] == [
        3e-4,
        1e-4,
        1e-4,
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("pretrain: {updates: 0}", r"pretrain\.updates: expected an integer >= 1, got 0"),
        (
            "finetune: {evaluations: true}",
            r"finetune\.evaluations: expected an integer >= 1, "
            r"got True",
        ),
        ("finetune: {tasks: {gqa: [a=1]}}", r"finetune\.tasks: unknown tasks \['gqa'\]"),
        ("finetune: {options: [lr]}", r"finetune\.options: expected a list of mmf_run options"),
        (
            "pretrain: {lr: 1}",
            r"pretrain: unknown keys \['lr'\]; expected keys from "
            r"\['updates', 'options'\]",
        ),
        ("runs: 3", r"top level: unknown keys \['runs'\]"),
        ("seeds: 0", r"seeds: expected an integer >= 1, got 0"),
        ("tables: 1", r"tables: expected a list of names, got 1"),
        ("systems: [uvla, true]", r"systems: expected a list of names"),
        (
            "finetune: {tasks: {nlvr2: {updates: -3}}}",
            r"finetune\.tasks\.nlvr2\.updates: expected "
            r"an integer >= 1, got -3",
        ),
        ("finetune: {tasks: {nlvr2: {lr: 1}}}", r"finetune\.tasks\.<task>: unknown keys \['lr'\]"),
        (
            "finetune: {tasks: {nlvr2: {options: lr}}}",
            r"finetune\.tasks\.nlvr2\.options: expected a "
            r"list",
        ),
        ("[1, 2]", r"the file: expected a mapping, got list"),
    ],
)
def test_recipe_errors_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "recipe.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ValueError, match=r"recipe\.yaml: " + message):
        load_recipe(path, TASKS)
    with pytest.raises(FileNotFoundError, match="--recipe: cannot read"):
        load_recipe(tmp_path / "missing.yaml", TASKS)


def test_replicate_plans_a_recipe_s_world_and_keeps_its_runs_apart(tmp_path, capsys):
    recipe = tmp_path / "short.yaml"
    recipe.write_text("world: tiny\nfinetune: {updates: 7, options: [optimizer.params.lr=1e-3]}\n")
    args = [
        "--recipe",
        str(recipe),
        "--data",
        str(tmp_path),
        "--systems",
        "base",
        "--seeds",
        "1",
        "--tasks",
        "nlvr2",
        "--plan",
    ]
    assert replicate_tool().main(args) == 0
    out = capsys.readouterr().out
    assert f"env.save_dir={tmp_path}/replication/toy_world_tiny__short/base/seed0/nlvr2" in out
    assert "training.max_updates=7" in out and "optimizer.params.lr=1e-3" in out
    assert replicate_tool().main([*args, "--finetune-updates", "9"]) == 0
    assert "training.max_updates=9" in capsys.readouterr().out  # the command line wins


def test_only_seeds_plans_those_seeds_and_refuses_others(tmp_path, capsys):
    args = [
        "--world",
        "tiny",
        "--data",
        str(tmp_path),
        "--systems",
        "base",
        "--seeds",
        "3",
        "--tasks",
        "nlvr2",
        "--plan",
    ]
    assert replicate_tool().main([*args, "--only-seeds", "2,1"]) == 0
    out = capsys.readouterr().out
    assert "base/seed1/nlvr2" in out and "base/seed2/nlvr2" in out
    assert "base/seed0/nlvr2" not in out
    assert replicate_tool().main([*args, "--only-seeds", "3"]) == 2
    assert "--only-seeds 3: expected seeds of 0..2 (--seeds 3)" in capsys.readouterr().err
    for bad in ("x", "-1", ","):
        with pytest.raises(SystemExit):
            replicate_tool().main([*args, "--only-seeds", bad])
        assert "expected comma-separated seeds >= 0" in capsys.readouterr().err


def test_a_recipe_gives_one_task_its_own_updates(tmp_path, capsys):
    recipe = tmp_path / "long_nlvr2.yaml"
    recipe.write_text(
        "world: tiny\nfinetune:\n  updates: 10\n  tasks:\n"
        "    nlvr2: {updates: 30, options: [a.b=1]}\n    vqa2: [c.d=2]\n"
    )
    loaded = load_recipe(recipe, TASKS)
    assert loaded.task_updates == (("nlvr2", 30),)
    assert loaded.task_options == (("nlvr2", ("a.b=1",)), ("vqa2", ("c.d=2",)))
    settings = Settings(
        World(tmp_path / "w"),
        tmp_path / "runs",
        seeds=(0,),
        finetune_updates=10,
        task_updates=loaded.task_updates,
        task_options=loaded.task_options,
    )
    steps = {step.task: step for step in system_steps(SYSTEMS["base"], 0, settings)}
    nlvr2, vqa = steps["nlvr2"].command, steps["vqa2"].command
    # the schedule follows the task's updates: 10 % warm-up, checkpoints and the evaluation
    assert {
        "training.max_updates=30",
        "scheduler.params.num_warmup_steps=3",
        "training.evaluation_interval=30",
        "training.checkpoint_interval=15",
        "a.b=1",
    } <= set(nlvr2)
    assert {"training.max_updates=10", "scheduler.params.num_warmup_steps=1", "c.d=2"} <= set(
        vqa
    ) and "a.b=1" not in vqa
    args = [
        "--recipe",
        str(recipe),
        "--data",
        str(tmp_path),
        "--systems",
        "base",
        "--seeds",
        "1",
        "--tasks",
        "nlvr2,vqa2",
        "--plan",
    ]
    assert replicate_tool().main(args) == 0
    out = capsys.readouterr().out
    assert "training.max_updates=30" in out and "training.max_updates=10" in out
    assert replicate_tool().main([*args, "--finetune-updates", "9"]) == 0
    out = capsys.readouterr().out  # the command line sets every task's
    assert "training.max_updates=9" in out and "training.max_updates=30" not in out


def _keys(data: dict, section: str = "") -> set[tuple[str, str]]:
    """(section, key) of every key a recipe uses, in recipe._KEYS's names."""
    found = set()
    for key, value in data.items():
        found.add((section, key))
        if section == "finetune" and key == "tasks":
            for options in value.values():
                if isinstance(options, dict):
                    found |= _keys(options, "finetune.tasks.<task>")
        elif isinstance(value, dict):
            found |= _keys(value, key)
    return found


def test_every_recipe_option_reaches_the_planned_commands(tmp_path, capsys):
    """A recipe with every key the format has (a key added to the format without a case here
    fails), through `replicate --plan` on the tiny world."""
    text = (
        "world: tiny\n"
        "tables: [2]\n"
        "systems: [uvla]\n"
        "seeds: 2\n"
        "pretrain: {updates: 6, options: [optimizer.params.lr=2e-4]}\n"
        "finetune:\n"
        "  updates: 8\n"
        "  evaluations: 2\n"
        "  options: [optimizer.params.lr=1e-3]\n"
        "  tasks:\n"
        "    nlvr2: {updates: 12, options: [model_config.uvla.pooling=mean]}\n"
        "    vqa2: [\"model_config.uvla.losses=[{'type':'softmax_kldiv'}]\"]\n"
    )
    recipe = tmp_path / "every.yaml"
    recipe.write_text(text)
    assert _keys(yaml.safe_load(text)) == {
        (section, key) for section, keys in recipe_format._KEYS.items() for key in keys
    }
    assert (
        replicate_tool().main(
            [
                "--recipe",
                str(recipe),
                "--data",
                str(tmp_path),
                "--only-seeds",
                "1",
                "--tasks",
                "vqa2,nlvr2,refcoco_plus",
                "--plan",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if line.startswith("[")]
    assert titles and all("μ-VLA, seed 1" in t for t in titles if "seed" in t)  # tables, systems,
    assert len([t for t in titles if "seed" in t]) == 5  # seeds: 2 (of which --only-seeds 1)
    commands = {
        line.split("env.save_dir=")[1].split()[0].rsplit("/", 1)[1]: line.split()
        for line in out.splitlines()
        if "env.save_dir=" in line
    }
    world = tmp_path / "toy_world_tiny"
    assert f"--out {world} " in out  # world: the tiny preset, made in --data
    assert all(f"env.data_dir={world}" in command for command in commands.values())
    assert {
        "training.max_updates=6",
        "optimizer.params.lr=2e-4",
        "training.evaluation_interval=6",
    } <= set(commands["pretrain"])
    assert "optimizer.params.lr=1e-3" not in commands["pretrain"]
    assert {
        "training.max_updates=12",
        "training.evaluation_interval=6",
        "model_config.uvla.pooling=mean",
        "optimizer.params.lr=1e-3",
    } <= set(commands["nlvr2"])
    assert {
        "training.max_updates=8",
        "training.evaluation_interval=4",
        "model_config.uvla.losses=[{'type':'softmax_kldiv'}]",
    } <= set(commands["vqa2"])
    assert "model_config.uvla.pooling=mean" not in commands["vqa2"]
    assert "training.max_updates=8" in commands["refcoco_plus"]
    assert any(a.endswith("refcoco_plus/best.ckpt") for a in commands["refcoco_plus_splits"])


def test_the_calibrated_recipe_plans_tables_2_and_3(tmp_path, capsys):
    """Tables 2 and 3 on the calibrated world: the granularities and μ-VLA_BC against random
    pairs on the narrative text, with the recipe's schedule and options, and the corpora
    they read."""
    assert (
        replicate_tool().main(
            [
                "--recipe",
                "configs/study/calibrated.yaml",
                "--tables",
                "2,3",
                "--seeds",
                "1",
                "--data",
                str(tmp_path),
                "--plan",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    pretrainings = [line.split() for line in out.splitlines() if "/seed0/pretrain " in line]
    systems = [
        next(a for a in c if a.startswith("env.save_dir=")).split("/")[-3] for c in pretrainings
    ]
    assert systems == ["rt", "rn", "is", "rt_rn", "uvla", "random_pairs_bc", "uvla_bc"]
    recipe = load_recipe(REPO / "configs/study/calibrated.yaml", TASKS)
    assert all(
        {"training.max_updates=5000", *recipe.pretrain_options} <= set(c) for c in pretrainings
    )
    assert "weakly aligned corpus corpus:" in out and "weakly aligned corpus corpus_bc:" in out
    assert f"--corpus {tmp_path}/toy_world_calibrated/text/narrative_corpus.txt --out" in out
    assert out.count("fine-tune ") == 7 * 4 and "base/" not in out


def test_the_paper_settings_table_plans_each_departure_and_all_three(tmp_path, capsys):
    """μ-VLA under the recipe's schedule with K = 5, an equal mix, the early curriculum and
    all three: the K = 10 corpus is built once, for the rows that read it."""
    assert (
        replicate_tool().main(
            [
                "--recipe",
                "configs/study/calibrated.yaml",
                "--tables",
                "paper",
                "--seeds",
                "1",
                "--data",
                str(tmp_path),
                "--plan",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    pretrainings = [line.split() for line in out.splitlines() if "/seed0/pretrain " in line]
    configs = {
        next(a for a in c if a.startswith("env.save_dir=")).split("/")[-3]: next(
            a for a in c if a.startswith("config=")
        )
        for c in pretrainings
    }
    assert configs == {
        "uvla": "config=projects/uvla/pretrain.yaml",
        "topk5": "config=projects/uvla/ablations/topk5.yaml",
        "equal_mix": "config=projects/uvla/ablations/equal_mix.yaml",
        "curriculum_early": "config=projects/uvla/ablations/curriculum_early.yaml",
        "uvla_paper": "config=projects/uvla/ablations/paper_settings.yaml",
    }
    recipe = load_recipe(REPO / "configs/study/calibrated.yaml", TASKS)
    assert all(
        {"training.max_updates=5000", *recipe.pretrain_options} <= set(c) for c in pretrainings
    )
    assert out.count("weakly aligned corpus corpus_k10:") == 1
    assert out.count("weakly aligned corpus corpus:") == 1
    assert out.count("fine-tune ") == 5 * 4


def test_a_recipe_with_several_evaluations_tests_and_splits_the_best_checkpoint(tmp_path):
    path = tmp_path / "best.yaml"
    path.write_text("finetune: {updates: 1500, evaluations: 5}\n")
    recipe = load_recipe(path, TASKS)
    assert recipe.finetune_evaluations == 5
    settings = Settings(
        World(tmp_path / "w"),
        tmp_path / "runs",
        seeds=(0,),
        finetune_updates=recipe.finetune_updates,
        finetune_evaluations=recipe.finetune_evaluations,
    )
    steps = system_steps(SYSTEMS["base"], 0, settings)
    finetunes = [step for step in steps if step.kind == "finetune"]
    assert all("training.evaluation_interval=300" in step.command for step in finetunes)
    referring, splits = steps[-2:]
    best, current = referring.folder / "best.ckpt", referring.folder / "current.ckpt"
    assert f"checkpoint.resume_file={best}" in splits.command and splits.needs == best
    assert best not in referring.prune and current in referring.prune
    assert splits.prune == (best,)
    # One evaluation, at the end (the default): the last checkpoint is the tested one.
    once = system_steps(SYSTEMS["base"], 0, replace(settings, finetune_evaluations=1))
    assert all(
        "training.evaluation_interval=1500" in step.command
        for step in once
        if step.kind == "finetune"
    )
    assert f"checkpoint.resume_file={current}" in once[-1].command
