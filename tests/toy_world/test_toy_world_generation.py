"""The generated toy world: determinism, its manifest, its formats read back, and MMF's own
datasets loading a batch of it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from mmf_uvlp.data_formats.annotations import (
    read_nlvr2,
    read_visual_entailment,
    read_vqa2_imdb,
)
from mmf_uvlp.data_formats.mmf_features import LmdbFeatures, read_lmdb, read_npy_folder
from mmf_uvlp.data_formats.refer import Refer
from mmf_uvlp.data_formats.text import read_captions, read_corpus
from mmf_uvlp.data_formats.vinvl import read_detections_jsonl, read_vinvl
from mmf_uvlp.toy_world import PRESETS, generate_world
from mmf_uvlp.toy_world.vocabulary import CLASSES

from helpers import REPO
from helpers.toy_world import files_under, ground_truth


POOLS = ("cc", "coco", "nlvr2", "flickr30k")


# ---------------------------------------------------------------- generation


def test_tiny_preset_is_fast(world):
    _, manifest, seconds = world
    assert seconds < 10, f"tiny world took {seconds:.1f} s"
    assert manifest["preset"] == "tiny" and manifest["feature_dim"] == 64
    assert len(CLASSES) >= 150


def test_same_seed_same_bytes(world, tmp_path):
    """Every file, the LMDB data.mdb files included, is byte-identical across runs."""
    out, _, _ = world
    generate_world(PRESETS["tiny"], tmp_path / "again")
    first, second = files_under(out), files_under(tmp_path / "again")
    assert sorted(first) == sorted(second)
    assert any(name.endswith("data.mdb") for name in first)
    different = [name for name in first if first[name] != second[name]]
    assert different == []


def test_other_seed_other_world(world, tmp_path):
    out, _, _ = world
    generate_world(replace(PRESETS["tiny"], seed=1, downstream=False), tmp_path / "s1")
    name = "detections/cc/predictions.tsv"
    assert (out / name).read_bytes() != (tmp_path / "s1" / name).read_bytes()


def test_manifest_paths_exist(world):
    out, manifest, _ = world

    def walk(value):
        for key, v in value.items():
            if isinstance(v, dict):
                yield from walk(v)
            elif key != "pool":
                yield v

    paths = list(walk(manifest["paths"]))
    assert len(paths) > 30
    for rel in paths:
        assert (out / rel).exists(), rel
    assert json.loads((out / "world.json").read_text()) == manifest
    for key in (
        "predictions_tsv",
        "features_tsv",
        "pretrain_lmdb",
        "captions_gt",
        "caption_corpus",
        "narrative_corpus",
    ):
        assert key in manifest["paths"]
    for task in ("vqa2", "nlvr2", "visual_entailment"):
        assert {"train", "val", "test", "features_lmdb", "features_npy"} <= set(
            manifest["paths"][task]
        )


# ---------------------------------------------------------------- formats read back


@pytest.mark.parametrize("pool", POOLS)
def test_vinvl_files_read_back(world, pool):
    out, manifest, _ = world
    paths = manifest["paths"]["pools"][pool]
    rows = list(
        read_vinvl(
            out / paths["predictions_tsv"],
            out / paths["features_tsv"],
            feature_dim=manifest["feature_dim"],
        )
    )
    assert len(rows) == manifest["counts"]["pools"][pool]["images"]
    ids = [p.image_id for p, _ in rows]
    assert ids == sorted(ids)
    simple = list(read_detections_jsonl(out / paths["detections_jsonl"]))
    for (pred, feats), det in zip(rows, simple):
        assert det.image_id == pred.image_id
        assert [o.rect for o in det.objects] == [o.rect for o in pred.objects]
        geometry = np.array(
            [
                [
                    o.rect[0] / pred.image_w,
                    o.rect[1] / pred.image_h,
                    o.rect[2] / pred.image_w,
                    o.rect[3] / pred.image_h,
                ]
                for o in pred.objects
            ]
        )
        np.testing.assert_allclose(feats.geometry[:, :4], geometry, atol=1e-5)
    gt = ground_truth(out, pool)
    assert sorted(gt) == ids


@pytest.mark.parametrize("pool", POOLS)
def test_mmf_features_read_back(world, pool):
    out, manifest, _ = world
    paths = manifest["paths"]["pools"][pool]
    dim, ncls = manifest["feature_dim"], manifest["cls_prob_columns"]
    vinvl = {
        p.image_id: (p, f)
        for p, f in read_vinvl(out / paths["predictions_tsv"], out / paths["features_tsv"])
    }
    lmdb_records = list(read_lmdb(out / paths["lmdb"], dim, ncls))
    npy_records = list(read_npy_folder(out / paths["npy_dir"], dim, ncls))
    assert [k for k, _ in lmdb_records] == [k for k, _ in npy_records] == sorted(vinvl)
    for (key, rec), (_, npy) in zip(lmdb_records, npy_records):
        pred, feats = vinvl[key]
        assert rec["image_id"] == key and rec["num_boxes"] == pred.num_boxes
        assert (rec["image_width"], rec["image_height"]) == (pred.image_w, pred.image_h)
        np.testing.assert_array_equal(rec["features"], feats.appearance)
        np.testing.assert_array_equal(npy["features"], rec["features"])
        np.testing.assert_array_equal(npy["cls_prob"], rec["cls_prob"])
        np.testing.assert_allclose(
            rec["bbox"], [o.rect for o in pred.objects] or np.zeros((0, 4)), atol=1e-3
        )
        assert [CLASSES[c].name for c in rec["objects"]] == [o.cls for o in pred.objects]
        np.testing.assert_allclose(rec["cls_prob"].sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(
            rec["cls_prob"][np.arange(len(pred.objects)), rec["objects"] + 1],
            [o.conf for o in pred.objects],
            atol=1e-3,
        )


def _mmf_lmdb_key(feature_path: str, keys: set[str]) -> str:
    """The key MMF rc10's LMDBFeatureReader._load looks up for ``feature_path``."""
    split = feature_path.split(".npy")[0]
    try:
        key = str(int(split.split("_")[-1]))
        if key in keys:
            return key
    except ValueError:
        pass
    return split


def test_downstream_files_read_back_and_find_their_features(world):
    out, manifest, _ = world
    paths = manifest["paths"]
    counts = manifest["counts"]
    coco = LmdbFeatures(out / paths["vqa2"]["features_lmdb"])
    nlvr = LmdbFeatures(out / paths["nlvr2"]["features_lmdb"])
    flickr = LmdbFeatures(out / paths["visual_entailment"]["features_lmdb"])
    try:
        for split in ("train", "val", "test"):
            vqa = list(read_vqa2_imdb(out / paths["vqa2"][split]))
            assert len(vqa) == counts["vqa2"][split]
            for r in vqa:
                key = _mmf_lmdb_key(r["feature_path"], set(coco.keys()))
                assert key == r["image_name"] and coco[key]["num_boxes"] > 0
                assert (out / paths["vqa2"]["features_npy"] / r["feature_path"]).exists()
                assert isinstance(r["image_id"], int) and isinstance(r["question_id"], int)
            records = list(read_nlvr2(out / paths["nlvr2"][split]))
            assert len(records) == counts["nlvr2"][split]
            for r in records:  # as MMF's NLVR2Dataset derives the two feature paths
                stem = "-".join(r["identifier"].split("-")[:-1])
                for side in ("img0", "img1"):
                    assert _mmf_lmdb_key(f"{stem}-{side}.npy", set(nlvr.keys())) in nlvr
            records = list(read_visual_entailment(out / paths["visual_entailment"][split]))
            assert len(records) == counts["visual_entailment"][split]
            for r in records:  # as MMF's VisualEntailmentDataset derives it
                feature_path = "{}.npy".format(r["Flikr30kID"].split(".")[0])
                assert _mmf_lmdb_key(feature_path, set(flickr.keys())) in flickr
        refer = Refer(out / paths["refcoco+"]["root"])
        expressions = list(refer.expressions())
        assert len(expressions) == sum(counts["refcoco+"]["sentences"].values())
        for e in expressions:
            assert e.image_file[: -len(".jpg")] in coco
        answers = (out / paths["vqa2"]["answers"]).read_text().split("\n")
        assert "yes" in answers and "red" in answers and "dog" in answers
    finally:
        for db in (coco, nlvr, flickr):
            db.close()


def test_text_files_read_back(world):
    out, manifest, _ = world
    paths, counts = manifest["paths"], manifest["counts"]
    captions = list(read_captions(out / paths["captions_gt"]))
    assert [i for i, _ in captions] == sorted(ground_truth(out, "cc"))
    corpus = list(read_corpus(out / paths["caption_corpus"]))
    assert len(corpus) == counts["caption_corpus"] > len(captions)
    assert not Counter(c for _, c in captions) - Counter(corpus)  # all captions, unpaired
    assert corpus[: len(captions)] != [c for _, c in captions]
    narrative = list(read_corpus(out / paths["narrative_corpus"]))
    assert len(narrative) == counts["narrative_corpus"]
    names = [c.name for c in CLASSES if not c.background]
    visual = [s for s in narrative if any(f" {n}" in s for n in names)]
    assert 0.3 * len(narrative) < len(visual) < len(narrative)


# ---------------------------------------------------------------- MMF's own datasets

_MMF_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    from omegaconf import OmegaConf
    from mmf.common.batch_collator import BatchCollator
    from mmf.datasets.builders.nlvr2.dataset import NLVR2Dataset
    from mmf.datasets.builders.visual_entailment.dataset import VisualEntailmentDataset
    from mmf.datasets.builders.vqa2.dataset import VQA2Dataset
    from mmf_uvlp.data_formats.mmf_features import LmdbFeatures

    world = sys.argv[1]
    paths = json.load(open(world + "/world.json"))["paths"]
    text = {"type": "vocab", "params": {"max_length": 14, "vocab": {
        "type": "random", "embedding_dim": 8,
        "vocab_file": world + "/" + paths["mmf_vocabulary"]},
        "preprocessor": {"type": "simple_sentence", "params": {}}}}
    answer = {"type": "vqa_answer", "params": {
        "num_answers": 10, "vocab_file": world + "/" + paths["vqa2"]["answers"],
        "preprocessor": {"type": "simple_word", "params": {}}}}
    out = {}
    for kind, cls, task, procs in [
            (kind, *spec) for kind in ("lmdb", "npy") for spec in (
                (VQA2Dataset, "vqa2", {"text_processor": text, "answer_processor": answer}),
                (NLVR2Dataset, "nlvr2", {"text_processor": text}),
                (VisualEntailmentDataset, "visual_entailment", {"text_processor": text}))]:
        feature = paths[task]["features_lmdb" if kind == "lmdb" else "features_npy"]
        config = OmegaConf.create({
            "data_dir": world, "depth_first": False, "fast_read": False,
            "use_images": False, "use_features": True, "max_features": 30,
            "return_features_info": True, "use_ocr": False, "use_ocr_info": False,
            "features": {"train": [feature]}, "annotations": {"train": [paths[task]["train"]]},
            "processors": procs})
        dataset = cls(config, "train", 0)
        dataset.init_processors()
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=4, collate_fn=BatchCollator(task, "train"))
        batch = next(iter(loader))
        first = dataset.annotation_db[0]
        features = batch["img0"]["image_feature_0"] if task == "nlvr2" \\
            else batch["image_feature_0"]
        key = first["feature_path"][: -len(".npy")]
        if task == "nlvr2":
            key = key.replace("-img1", "-img0")
        del dataset, loader
        with LmdbFeatures(world + "/" + paths[task]["features_lmdb"]) as db:
            expected = db[key]["features"]
        got = features[0, : len(expected)].numpy()
        out[kind + ":" + task] = {"batch": int(batch["targets"].shape[0]),
                     "features": list(features.shape),
                     "match": bool(np.array_equal(got, expected))}
    print(json.dumps(out))
""")


def test_mmf_datasets_load_a_batch(world):
    """MMF rc10's own vqa2 / nlvr2 / visual_entailment datasets read the tiny world,
    from the LMDBs and from the npy folders, and see the features we wrote (an MMF that
    cannot be imported fails this test)."""
    out, manifest, _ = world
    result = subprocess.run(
        [sys.executable, "-c", _MMF_SCRIPT, str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    dim = manifest["feature_dim"]
    for kind in ("lmdb", "npy"):
        for task in ("vqa2", "nlvr2", "visual_entailment"):
            entry = report[f"{kind}:{task}"]
            assert entry["batch"] == 4 and entry["features"] == [4, 30, dim], (kind, task)
            assert entry["match"], (kind, task)
