"""The three analysis tools end to end on the tiny world, with tiny random checkpoints."""

import json

import numpy as np
import pytest
import torch

from mmf_uvlp.cli import attention_maps, plot_alignment, probe_grounding

from helpers import REPO


TINY = str(REPO / "configs" / "models" / "uvla" / "tiny_random.yaml")
TOOLS = {
    module.__name__.rsplit(".", 1)[1]: module
    for module in (attention_maps, plot_alignment, probe_grounding)
}
FEATURE_DIM = 64  # the tiny preset's
PNG = b"\x89PNG\r\n\x1a\n"


def _tool(name: str):
    return TOOLS[name].main


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A tiny uvla state dict (not Base's weights) and a tiny MMF visual_bert .ckpt."""
    from omegaconf import OmegaConf

    from mmf.models.visual_bert import VisualBERT
    from mmf_uvlp.analysis.systems import load_system, uvla_config

    folder = tmp_path_factory.mktemp("checkpoints")
    uvla = load_system("t", "base", uvla_config(TINY), FEATURE_DIM, seed=1)
    torch.save(uvla.model.state_dict(), folder / "uvla_final.pth")
    config = {
        "model": "visual_bert",
        "bert_model_name": None,
        "training_head_type": "classification",
        "num_labels": 3,
        "visual_embedding_dim": FEATURE_DIM,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 30522,
        "special_visual_initialize": True,
        "embedding_strategy": "plain",
        "bypass_transformer": False,
        "output_attentions": False,
        "output_hidden_states": False,
        "random_initialize": True,
        "freeze_base": False,
        "finetune_lr_multiplier": 1,
        "losses": [],
    }
    torch.manual_seed(0)
    model = VisualBERT(OmegaConf.create(config))
    model.build()
    torch.save(
        {
            "model": model.state_dict(),
            "config": {"model": "visual_bert", "model_config": {"visual_bert": config}},
        },
        folder / "visual_bert.ckpt",
    )
    return folder / "uvla_final.pth", folder / "visual_bert.ckpt"


def _common(world):
    return ["--world", str(world), "--split", "all", "--config", TINY]


@pytest.fixture(scope="module")
def probe(tiny_world, checkpoints, tmp_path_factory):
    out = tmp_path_factory.mktemp("probe")
    assert (
        _tool("probe_grounding")(
            _common(tiny_world)
            + ["--model", "Base=base", "--model", f"Tiny={checkpoints[0]}", "--out", str(out)]
        )
        == 0
    )
    return out


def test_probe_writes_tables_and_plots(probe):
    report = json.loads((probe / "probe.json").read_text())
    assert list(report["systems"]) == ["Base", "Tiny"]
    base, tiny = report["systems"]["Base"], report["systems"]["Tiny"]
    assert (base["layers"], base["heads"]) == (1, 2)
    assert base["entity"]["n"] > 100 and len(base["syntactic"]) == 10
    assert np.array(base["entity"]["accuracy"]).shape == (1, 2)
    # same data: same baselines; other weights: other attention
    for key in ("n", "rule_baseline", "random_baseline", "upper_bound"):
        assert base["entity"][key] == tiny["entity"][key]
    assert base["entity"]["attention_to_regions"] != tiny["entity"]["attention_to_regions"]
    assert 0 < base["entity"]["random_baseline"] < base["entity"]["upper_bound"] <= 100
    assert report["data"]["captions"] == 5 * report["data"]["images"]
    table = (probe / "probe.md").read_text()
    assert (
        "| Type | n | Rule | Random | Upper | Base acc | Base head | Tiny acc | Tiny head |"
        in table
    )
    assert f"| entity | {base['entity']['n']} |" in table
    for name in ("entity_grounding.png", "syntactic_grounding.png"):
        assert (probe / name).read_bytes().startswith(PNG)


def test_probe_compares_with_an_mmf_visual_bert_checkpoint(tiny_world, checkpoints, tmp_path):
    assert (
        _tool("probe_grounding")(
            _common(tiny_world)
            + [
                "--max-images",
                "4",
                "--compare",
                "Base=base",
                f"VisualBERT={checkpoints[1]}",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "probe.json").read_text())
    visual_bert = report["systems"]["VisualBERT"]
    assert (visual_bert["layers"], visual_bert["heads"]) == (2, 2)
    share = np.array(visual_bert["entity"]["attention_to_regions"])
    assert share.shape == (2, 2) and (share > 0).all() and (share < 1).all()


def test_attention_maps_of_the_best_heads(tiny_world, checkpoints, probe, tmp_path):
    assert (
        _tool("attention_maps")(
            _common(tiny_world)
            + [
                "--model",
                "Base=base",
                "--model",
                f"Tiny={checkpoints[0]}",
                "--layer",
                "best",
                "--probe",
                str(probe / "probe.json"),
                "--num-examples",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "attention_maps.json").read_text())
    assert report["layer"] == "best" and len(report["examples"]) == 2
    best = json.loads((probe / "probe.json").read_text())["systems"]["Tiny"]["entity"]["best_head"]
    for record in report["examples"]:
        image_id, line = record["key"].split("#")
        assert (tmp_path / f"attention_{image_id}_{line}.png").read_bytes().startswith(PNG)
        assert len(record["gold"]) == len(record["words"])
        for name in ("Base", "Tiny"):
            weights = np.array(record["systems"][name]["weights"])
            assert weights.shape == (len(record["words"]), len(record["regions"]))
            assert (weights >= 0).all() and (weights.sum(axis=1) <= 1 + 1e-5).all()
        assert f"{best['layer']}-{best['head']}" in record["systems"]["Tiny"]["heads"]


def test_attention_maps_of_chosen_captions(tiny_world, tmp_path):
    from mmf_uvlp.data_formats.flickr30k_entities import Flickr30kEntities

    image_id = Flickr30kEntities(tiny_world / "flickr30k_entities").image_ids("val")[0]
    assert (
        _tool("attention_maps")(
            _common(tiny_world)
            + [
                "--model",
                "Base=base",
                "--examples",
                f"{image_id}#3",
                "--layer",
                "layer:1",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    (record,) = json.loads((tmp_path / "attention_maps.json").read_text())["examples"]
    assert record["key"] == f"{image_id}#3"
    with pytest.raises(SystemExit, match="no such captions"):
        _tool("attention_maps")(
            _common(tiny_world)
            + ["--model", "Base=base", "--examples", f"{image_id}#9", "--out", str(tmp_path)]
        )


def _mrr_by_loop(vectors: np.ndarray, classes: list, modalities: list) -> float:
    """Each region's class word rank among the classes' word centroids (mean of the unit
    word vectors, by cosine; ties count for the region), averaged as 1 / rank."""
    unit = [v / np.linalg.norm(v) for v in vectors]
    names = sorted(set(classes))
    centroid = {}
    for name in names:
        mean = np.mean(
            [u for u, c, m in zip(unit, classes, modalities) if c == name and m == "word"], axis=0
        )
        centroid[name] = mean / np.linalg.norm(mean)
    reciprocal = []
    for u, c, m in zip(unit, classes, modalities):
        if m == "region":
            score = {name: float(u @ centroid[name]) for name in names}
            reciprocal.append(1 / (1 + sum(score[n] > score[c] for n in names)))
    return float(np.mean(reciprocal))


def test_alignment_plot_and_mrr(tiny_world, checkpoints, tmp_path, monkeypatch, saved_figures):
    tool = plot_alignment
    represented = {}

    def represent(system, *args, **kwargs):  # the tool's own, keeping what it returns
        reps = represent_for_real(system, *args, **kwargs)
        represented[system.name] = reps
        return reps

    represent_for_real = tool.represent
    monkeypatch.setattr(tool, "represent", represent)
    assert (
        tool.main(
            _common(tiny_world)
            + [
                "--model",
                "Base=base",
                "--model",
                f"VisualBERT={checkpoints[1]}",
                "--classes",
                "5",
                "--per-class",
                "6",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert (tmp_path / "alignment.png").read_bytes().startswith(PNG)
    report = json.loads((tmp_path / "alignment.json").read_text())
    assert len(report["classes"]) == 5
    base, visual_bert = report["systems"]["Base"], report["systems"]["VisualBERT"]
    # uvla reads detector tags (R-T input); MMF's visual_bert has no tag input
    assert set(base["points"]) == {"word", "region", "tag"}
    assert set(visual_bert["points"]) == {"word", "region"}
    assert base["points"]["word"] == base["points"]["region"] == report["instances"]
    chance, mrr = np.mean(1 / np.arange(1, 6)), {}
    for name, system in (("Base", base), ("VisualBERT", visual_bert)):
        reps = represented[name]
        # the MRR of these representations, recomputed here; this case is away from chance
        mrr[name] = _mrr_by_loop(reps.vectors, reps.classes, reps.modalities)
        assert system["mrr"] == pytest.approx(mrr[name], abs=1e-4), name
        assert system["chance_mrr"] == pytest.approx(chance, abs=1e-4)
        assert len(system["tsne"]) == sum(system["points"].values()) == len(reps.classes)
    assert abs(base["mrr"] - chance) > 0.01 or abs(visual_bert["mrr"] - chance) > 0.01
    # The figure: one panel per system, titled with its MRR, a point per representation.
    (figure,) = saved_figures
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == [
        f"{name} (region->word MRR {mrr[name]:.2f})" for name in ("Base", "VisualBERT")
    ]
    for ax, system in zip(panels, (base, visual_bert)):
        drawn = sorted(tuple(np.round(xy, 3)) for c in ax.collections for xy in c.get_offsets())
        assert drawn == sorted((round(x, 3), round(y, 3)) for _, _, x, y in system["tsne"])


def test_checkpoint_errors_are_clear(tiny_world, checkpoints, tmp_path):
    from mmf_uvlp.analysis.systems import load_system, uvla_config

    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        load_system("X", str(tmp_path / "missing.pth"), uvla_config(TINY), FEATURE_DIM)
    # the tiny checkpoint does not fit the 2-layer MiniLM of projects/uvla/pretrain.yaml
    with pytest.raises(ValueError, match="missing|does not fit"):
        load_system("X", str(checkpoints[0]), uvla_config(None), FEATURE_DIM)
    old = tmp_path / "old_world"
    old.mkdir()
    manifest = json.loads((tiny_world / "world.json").read_text())
    del manifest["paths"]["flickr30k_entities"]
    (old / "world.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="regenerate"):
        _tool("probe_grounding")(
            ["--world", str(old), "--model", "Base=base", "--out", str(tmp_path / "o")]
        )
