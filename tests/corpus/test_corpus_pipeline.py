"""The whole corpus build: answers, resumption, shards, bad input, CLI, toy world."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mmf_uvlp.corpus.pipeline import STAGES, build, merge
from mmf_uvlp.corpus.shards import iter_records
from mmf_uvlp.errors import EmptyInputError, FormatError

from helpers import REPO
from helpers.corpus import (
    IMAGES,
    SENTENCES,
    TAG_QUERIES,
    features_row,
    output_files,
    predictions_row,
    shared_resources,
    tiny_command,
    tiny_config,
    write_tiny_world,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return write_tiny_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def reference(world, tmp_path_factory):
    """An uninterrupted single run: the bytes every other run must reproduce."""
    out = str(tmp_path_factory.mktemp("reference"))
    report = build(tiny_config(world), out, resources=shared_resources())
    return out, report


def test_single_run_answers(reference):
    out, report = reference
    records = list(iter_records(out))
    assert [r["image_id"] for r in records] == ["img0", "img1", "img2", "img3", "img5"]
    assert {r["image_id"]: r["tag_query"] for r in records} == TAG_QUERIES
    by_id = {r["image_id"]: r for r in records}
    img0 = by_id["img0"]
    assert [len(r["sentences"]) for r in records] == [3] * 5
    top = [s["text"] for s in img0["sentences"][:2]]
    assert all("frisbee" in t for t in top)  # both dog-and-frisbee sentences, ...
    assert sum("park" in t for t in top) == 1  # ... the duplicated one only once
    assert by_id["img2"]["sentences"][0]["text"] == SENTENCES[2]
    for rec in records:  # schema: regions aligned with detector order, spans index the text
        objects = dict(IMAGES)[rec["image_id"]]
        assert [r["label"] for r in rec["regions"]] == [o["class"] for o in objects]
        scores = [s["score"] for s in rec["sentences"]]
        assert scores == sorted(scores, reverse=True)
        for s in rec["sentences"]:
            for p in s["noun_phrases"]:
                assert s["text"][p["char_span"][0] : p["char_span"][1]] == p["text"]
                assert p["linked"] == (p["link_score"] > 0)
    pizza = by_id["img2"]["sentences"][0]["noun_phrases"]
    assert [(p["text"], p["region"], p["linked"]) for p in pizza] == [
        ("A pizza", 0, True),
        ("a plate", 2, True),
        ("a wooden table", 1, True),
    ]
    assert report["detections"]["rows"] == 6 and report["detections"]["dropped_no_tags"] == 1
    assert report["inputs"]["feature_dim"] == 8
    assert report["inputs"]["corpus_distinct_texts"] == 11
    assert report["skipped"]["counts"] == {}
    assert report["quality"]["caption_recall"]["caption_in_pool"] == 5
    assert report["quality"]["caption_recall"]["recall@3"] == 1.0
    precision = report["quality"]["link_precision"]
    assert precision["precision"] > 0.5
    bands = precision["by_link_score"]
    assert sum(b["linked"] for b in bands) == precision["linked"] > 0
    assert sum(b["linked"] * b["precision"] for b in bands) == pytest.approx(
        precision["linked"] * precision["precision"], abs=1e-3
    )
    lows = [1.0 if b["link_score"] == "1.00" else float(b["link_score"][1:5]) for b in bands]
    assert lows == sorted(lows) and len(set(lows)) == len(lows)
    for name in ("report.md", "scores_hist.png", "examples.html", "examples.md"):
        assert os.path.getsize(os.path.join(out, "report", name)) > 0
    assert "linked" in open(os.path.join(out, "report", "examples.html")).read()


def test_same_inputs_same_bytes_and_own_caption_exclusion(world, reference, tmp_path):
    out = str(tmp_path / "again")
    build(tiny_config(world), out, resources=shared_resources())
    assert output_files(out) == output_files(reference[0])
    excl = str(tmp_path / "excl")
    report = build(
        tiny_config(world, "retrieve.exclude_own_caption=true"), excl, resources=shared_resources()
    )
    for rec in iter_records(excl):
        own = SENTENCES[{"img0": 0, "img1": 1, "img2": 2, "img3": 3, "img5": 4}[rec["image_id"]]]
        norm = own.lower().strip(".")
        assert all(s["text"].lower().strip(".") != norm for s in rec["sentences"])
    assert report["retrieval"]["own_caption_dropped"] >= 5
    assert isinstance(report["quality"]["caption_recall"], str)


class _Killed(Exception):
    pass


# every unit of work of the tiny build: 3 chunks of 2 images per stage, 3 embedding chunks
ALL_WORK = {(stage, c) for stage in ("embed_corpus",) + STAGES for c in range(3)}


def _chunk_files(out: str) -> dict:
    """(inode, mtime) of every finished chunk file: unchanged unless it was rewritten."""
    found = {}
    for root, _, files in os.walk(out):
        for name in files:
            if (name.startswith(("chunk-", "part-"))) and ".tmp." not in name:
                stat = os.stat(os.path.join(root, name))
                found[os.path.relpath(os.path.join(root, name), out)] = (
                    stat.st_ino,
                    stat.st_mtime_ns,
                )
    return found


@pytest.mark.parametrize(
    "stage,after",
    [
        ("embed_corpus", 1),
        ("detections", 1),
        ("queries", 2),
        ("retrieve", 1),
        ("phrases", 2),
        ("link", 1),
    ],
)
def test_resume_after_kill_gives_identical_bytes(world, reference, tmp_path, stage, after):
    """The resumed run does only the work the killed one had not finished, same bytes."""
    out = str(tmp_path / "resumed")
    config = tiny_config(world)
    first, second = [], []

    def hook(name, chunk):
        first.append((name, chunk))
        if name == stage and sum(s == stage for s, _ in first) == after:
            raise _Killed(f"{name} {chunk}")

    with pytest.raises(_Killed):
        build(config, out, resources=shared_resources(), hook=hook)
    finished = _chunk_files(out)
    assert finished  # the kill left finished work behind
    os.makedirs(os.path.join(out, "annotations"), exist_ok=True)
    with open(os.path.join(out, "annotations", "part-000002.jsonl.gz.tmp.123"), "w") as f:
        f.write("half-written")  # leftovers of the kill must not matter
    build(
        config,
        out,
        resources=shared_resources(),
        hook=lambda name, chunk: second.append((name, chunk)),
    )
    assert not set(first) & set(second), "finished chunks were computed again"
    assert set(first) | set(second) == ALL_WORK and len(first) + len(second) == len(ALL_WORK)
    after_resume = _chunk_files(out)
    assert {k: after_resume[k] for k in finished} == finished  # not rewritten
    assert output_files(out) == output_files(reference[0])  # the stray file was removed


def test_shards_merged_equal_single_run(world, reference, tmp_path):
    cache = str(tmp_path / "sentences")
    shard_dirs = []
    for i in range(2):
        d = str(tmp_path / f"shard{i}")
        summary = build(
            tiny_config(world), d, shard=(i, 2), sentence_cache=cache, resources=shared_resources()
        )
        assert summary["shard"] == f"{i}/2"
        shard_dirs.append(d)
    assert sorted(os.listdir(os.path.join(shard_dirs[1], "annotations"))) == [
        "index.json",
        "part-000001.jsonl.gz",
    ]
    merged = str(tmp_path / "merged")
    merge(shard_dirs[::-1], merged)
    assert output_files(merged) == output_files(reference[0])
    with pytest.raises(RuntimeError, match="exactly once"):
        merge(shard_dirs[:1], str(tmp_path / "bad"))


def test_config_change_needs_restart(world, tmp_path):
    out = str(tmp_path / "o")
    build(tiny_config(world, gt=False), out, resources=shared_resources())
    with pytest.raises(RuntimeError, match="restart"):
        build(tiny_config(world, "retrieve.k=2", gt=False), out, resources=shared_resources())
    report = build(
        tiny_config(world, "retrieve.k=2", "tags.on_empty=keep", gt=False),
        out,
        resources=shared_resources(),
        restart=True,
    )
    assert report["retrieval"]["retrieved"] == 10 and report["quality"] == {}
    img4 = [r for r in iter_records(out) if r["image_id"] == "img4"]
    assert img4[0]["tag_query"] == "" and img4[0]["sentences"] == []  # kept, nothing retrieved


def _bad_world(root):
    preds = [predictions_row(i, o) for i, o in IMAGES]
    feats = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    preds[1] = "img1\t{broken json"
    preds[3] = predictions_row("img3", [{"rect": [0, 0, 400, 40], "class": "cat", "conf": 0.9}])
    feats[5] = "img5\t3\t!!!!"
    preds.append("")  # a blank line: an error, or counted when skipping
    corpus = (
        ("\n".join(SENTENCES[:4]) + "\n\n").encode()
        + b"caf\xe9\n"
        + ("\n".join(SENTENCES[4:]) + "\n").encode()
    )
    return write_tiny_world(root, preds, feats, corpus)


def test_bad_input_errors_name_file_and_line(tmp_path):
    """Detections are checked first (before the corpus is embedded), then the corpus."""
    paths = _bad_world(tmp_path / "w")
    with pytest.raises(FormatError, match=r"predictions\.tsv:2: field 'json'"):
        build(tiny_config(paths, gt=False), str(tmp_path / "o"), resources=shared_resources())
    assert not os.path.exists(tmp_path / "o" / "sentences" / "meta.json")
    good = write_tiny_world(tmp_path / "good")
    paths["predictions"], paths["features"] = good["predictions"], good["features"]
    with pytest.raises(FormatError, match=r"corpus\.txt:5"):
        build(tiny_config(paths, gt=False), str(tmp_path / "o2"), resources=shared_resources())


def test_bad_input_skipped_and_counted(tmp_path):
    paths = _bad_world(tmp_path / "w")
    report = build(
        tiny_config(paths, "run.on_error=skip", gt=False),
        str(tmp_path / "o"),
        resources=shared_resources(),
    )
    assert report["skipped"]["counts"] == {
        "corpus: encoding": 1,
        "corpus: text": 1,
        "features: features": 1,
        "predictions: json": 1,
        "predictions: objects[].rect": 1,
        "predictions: row": 1,
    }
    assert any(
        "predictions.tsv:4" in e
        for e in report["skipped"]["examples"]["predictions: objects[].rect"]
    )
    assert report["skipped"]["examples"]["predictions: row"] == [
        f"{paths['predictions']}:7: field 'row': expected a non-empty row, got 'an empty line'"
    ]
    assert [r["image_id"] for r in iter_records(str(tmp_path / "o"))] == ["img0", "img2"]
    assert report["inputs"]["corpus_lines"] == 14 and report["inputs"]["corpus_sentences"] == 12
    md = open(tmp_path / "o" / "report" / "report.md").read()
    assert "predictions: json" in md


def _rows():
    return (
        [predictions_row(i, o) for i, o in IMAGES],
        [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)],
    )


def _ids(out) -> list:
    return [r["image_id"] for r in iter_records(str(out))]


GOOD_IDS = ["img0", "img1", "img2", "img3", "img5"]  # img4 has no tag


def test_duplicate_image_id_is_refused_naming_both_lines(tmp_path):
    preds, feats = _rows()
    paths = write_tiny_world(tmp_path / "w", preds + [preds[1]], feats + [feats[1]])
    with pytest.raises(FormatError) as info:
        build(tiny_config(paths, gt=False), str(tmp_path / "o"), resources=shared_resources())
    assert str(info.value) == (
        f"{paths['predictions']}:7: field 'image_id': expected an image id not used before "
        f"({paths['predictions']}:2 has it already), got 'img1'"
    )
    report = build(
        tiny_config(paths, "run.on_error=skip", gt=False),
        str(tmp_path / "s"),
        resources=shared_resources(),
    )
    assert report["skipped"]["counts"] == {"predictions: image_id": 1}
    assert report["skipped"]["examples"]["predictions: image_id"] == [str(info.value)]
    records = list(iter_records(str(tmp_path / "s")))
    assert [r["image_id"] for r in records] == GOOD_IDS
    assert records[1]["position"] == 1  # the first row keeps the id


def test_nothing_usable_is_a_clear_failure(tmp_path):
    paths = write_tiny_world(tmp_path / "empty", [], [])
    for name in ("predictions", "features"):
        open(paths[name], "w").close()
    cmd = [
        sys.executable,
        os.path.join(REPO, "tools", "build_corpus.py"),
        "run",
        "--predictions",
        paths["predictions"],
        "--features",
        paths["features"],
        "--corpus",
        paths["corpus"],
        "--no-progress",
    ]
    for policy in ("raise", "skip"):
        result = subprocess.run(
            cmd + ["--on-error", policy, "--out", str(tmp_path / policy)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2 and result.stderr == (
            f"build_corpus.py: error: no usable images in {paths['predictions']} and "
            f"{paths['features']}: no rows; nothing written\n"
        ), result.stderr[-2000:]
    paths = write_tiny_world(tmp_path / "bad", [f"img{i}\t{{broken" for i in range(3)], [])
    with pytest.raises(
        EmptyInputError,
        match=r"no usable images in .*predictions\.tsv.*: "
        r"3 rows, 3 skipped \{'predictions: json': 3\}",
    ):
        build(
            tiny_config(paths, "run.on_error=skip", "inputs.validate_features=false", gt=False),
            str(tmp_path / "o1"),
            resources=shared_resources(),
        )
    paths = write_tiny_world(tmp_path / "blank", corpus_bytes=b"\n  \n\n")
    with pytest.raises(
        EmptyInputError,
        match=r"no usable sentences in .*corpus\.txt: 3 lines, "
        r"all skipped \(\{'corpus: text': 3\}\)",
    ):
        build(
            tiny_config(paths, "run.on_error=skip", gt=False),
            str(tmp_path / "o2"),
            resources=shared_resources(),
        )
    paths = write_tiny_world(tmp_path / "nothing", corpus_bytes=b"")
    with pytest.raises(EmptyInputError, match=r"no usable sentences in .*corpus\.txt: 0 lines;"):
        build(tiny_config(paths, gt=False), str(tmp_path / "o3"), resources=shared_resources())


def test_corrupt_first_features_row_never_sets_d(tmp_path):
    preds, feats = _rows()
    feats[0] = features_row("img0", 5, 0, dim=5)
    paths = write_tiny_world(tmp_path / "w", preds, feats)
    with pytest.raises(
        FormatError,
        match=r"features\.tsv:1: field 'features': expected "
        r"5 x \(8 \+ 6\) float32 values",
    ):
        build(tiny_config(paths, gt=False), str(tmp_path / "o"), resources=shared_resources())
    report = build(
        tiny_config(paths, "run.on_error=skip", gt=False),
        str(tmp_path / "s"),
        resources=shared_resources(),
    )
    assert report["skipped"]["counts"] == {"features: features": 1}
    assert _ids(tmp_path / "s") == ["img1", "img2", "img3", "img5"]
    assert report["inputs"]["feature_dim"] == 8
    configured = build(
        tiny_config(paths, "run.on_error=skip", "inputs.feature_dim=5", gt=False),
        str(tmp_path / "d5"),
        resources=shared_resources(),
    )
    assert configured["skipped"]["counts"] == {"features: features": 5}  # the setting wins
    assert _ids(tmp_path / "d5") == ["img0"]


@pytest.mark.parametrize("where", ["predictions", "features", "both"])
def test_blank_line_inside_a_tsv_is_a_bad_line(tmp_path, where):
    """Raise: the blank line is named; skip: it is counted and no image is lost."""
    preds, feats = _rows()
    files = ["predictions", "features"] if where == "both" else [where]
    for name, rows in (("predictions", preds), ("features", feats)):
        if name in files:
            rows.insert(2, "")
    paths = write_tiny_world(tmp_path / "w", preds, feats)
    with pytest.raises(FormatError) as info:
        build(tiny_config(paths, gt=False), str(tmp_path / "o"), resources=shared_resources())
    blank = "field 'row': expected a non-empty row, got 'an empty line'"
    assert str(info.value) == f"{paths[files[0]]}:3: {blank}"
    report = build(
        tiny_config(paths, "run.on_error=skip", gt=False),
        str(tmp_path / "s"),
        resources=shared_resources(),
    )
    assert report["skipped"]["examples"] == {
        f"{name}: row": [f"{paths[name]}:3: {blank}"] for name in files
    }
    assert report["skipped"]["counts"] == {f"{name}: row": 1 for name in files}
    assert _ids(tmp_path / "s") == GOOD_IDS


def test_restart_after_a_failed_build_starts_over(world, tmp_path):
    """A build that failed after the sentence stage, rerun with other settings and
    --restart, rebuilds the sentence cache instead of refusing it."""
    paths = dict(world, captions_gt=str(tmp_path / "captions.tsv"))
    with open(world["captions_gt"]) as src, open(paths["captions_gt"], "w") as dst:
        dst.write(src.read() + "a line without a tab\n")
    out = str(tmp_path / "o")
    with pytest.raises(FormatError, match=r"captions\.tsv:6: field 'row'"):
        build(tiny_config(paths), out, resources=shared_resources())
    meta = os.path.join(out, "sentences", "meta.json")
    old_fingerprint = json.load(open(meta))["fingerprint"]
    config = tiny_config(paths, "run.on_error=skip")  # on_error: the sentences' settings too
    with pytest.raises(RuntimeError, match="--restart"):
        build(config, out, resources=shared_resources())
    report = build(config, out, resources=shared_resources(), restart=True)
    assert report["skipped"]["counts"] == {"captions_gt: row": 1}
    assert json.load(open(meta))["fingerprint"] == config.sentence_fingerprint() != old_fingerprint
    assert _ids(out) == GOOD_IDS
    embeddings = os.stat(os.path.join(out, "sentences", "embeddings.npy"))
    build(config, out, resources=shared_resources(), restart=True)
    again = os.stat(os.path.join(out, "sentences", "embeddings.npy"))
    assert (again.st_ino, again.st_mtime_ns) == (embeddings.st_ino, embeddings.st_mtime_ns)


def test_cli_kill_and_resume(world, reference, tmp_path):
    """A real abrupt exit (os._exit) mid-stage, then the same command again."""
    out = str(tmp_path / "cli")
    cmd = tiny_command(world, "run", out)
    env = dict(os.environ, MMF_UVLP_CORPUS_ABORT_AFTER="retrieve:2", HF_HUB_OFFLINE="1")
    first = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert first.returncode == 75, first.stderr[-2000:]
    finished = _chunk_files(out)
    assert sorted(k for k in finished if k.startswith("work/retrieval/") and k.endswith("npz")) == [
        "work/retrieval/chunk-000000.npz",
        "work/retrieval/chunk-000001.npz",
    ]
    env.pop("MMF_UVLP_CORPUS_ABORT_AFTER")
    second = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    assert (
        f"5 of 6 images written to {out}/annotations; skipped: 1 image without a tag after "
        "filtering; report:"
    ) in second.stdout
    resumed = _chunk_files(out)
    assert {k: resumed[k] for k in finished} == finished  # finished work was not redone
    assert "work/retrieval/chunk-000002.npz" in resumed
    assert output_files(out) == output_files(reference[0])


def test_toy_world_end_to_end(tmp_path):
    """The project's toy world: retrieval finds true captions, links mostly name real objects."""
    script = os.path.join(REPO, "tools", "make_toy_world.py")
    root = tmp_path / "toy"
    subprocess.run(
        [
            sys.executable,
            script,
            "--preset",
            "tiny",
            "--seed",
            "0",
            "--out",
            str(root),
            "--no-downstream",
            "--no-progress",
        ],
        check=True,
        capture_output=True,
    )
    manifest = json.loads((root / "world.json").read_text())
    p = {k: str(root / v) for k, v in manifest["paths"].items() if isinstance(v, str)}
    from mmf_uvlp.corpus.config import load_config

    config = load_config(
        data={
            "inputs": {
                "predictions": p["predictions_tsv"],
                "features": p["features_tsv"],
                "corpus": [p["caption_corpus"], p["narrative_corpus"]],
                "captions_gt": p["captions_gt"],
                "objects_gt": p["images_gt"],
            },
            "output": {"chunk_images": 16},
            "run": {"progress": False},
        }
    )
    report = build(config, str(tmp_path / "out"), resources=shared_resources())
    n = manifest["counts"]["pools"]["cc"]["images"]
    assert report["detections"]["rows"] == n and report["skipped"]["counts"] == {}
    recall = report["quality"]["caption_recall"]
    assert recall["caption_in_pool"] == n and recall["recall@5"] >= 0.5
    assert report["quality"]["link_precision"]["precision"] >= 0.45
    assert report["quality"]["link_precision"]["grounded_rate"] >= 0.8


def _cut(path: str, size: int = 50) -> None:
    with open(path, "rb") as handle:
        head = handle.read(size)
    with open(path, "wb") as handle:
        handle.write(head)


def test_a_damaged_part_is_found_and_rebuilt_by_the_next_run(world, reference, tmp_path, caplog):
    import logging
    import shutil

    out = str(tmp_path / "out")
    shutil.copytree(reference[0], out, symlinks=True)
    part = os.path.join(out, "annotations", "part-000000.jsonl.gz")
    _cut(part)
    with caplog.at_level(logging.WARNING, logger="mmf_uvlp.corpus.link"):
        build(tiny_config(world), out, resources=shared_resources())
    warned = [r.getMessage() for r in caplog.records if part in r.getMessage()]
    assert len(warned) == 1 and "a complete gzip stream" in warned[0], warned
    assert warned[0].endswith("the chunk is linked and written again")
    assert output_files(out) == output_files(reference[0])


def test_a_damaged_part_read_by_iter_records_names_file_and_line(reference, tmp_path):
    part = str(tmp_path / "part-000000.jsonl.gz")
    with open(os.path.join(reference[0], "annotations", "part-000000.jsonl.gz"), "rb") as handle:
        whole = handle.read()
    with open(part, "wb") as handle:
        handle.write(whole[:50])
    with pytest.raises(FormatError) as error:
        list(iter_records(part))
    assert str(error.value).startswith(
        f"{part}:1: field 'gzip': expected a complete gzip stream "
        "(damaged or cut short: rebuild it), got 'EOFError: "
    )


@pytest.mark.parametrize("name", ["part-000000.jsonl", "part-000000.jsonl.gz"])
def test_a_part_missing_whole_records_is_not_complete(tmp_path, name):
    """A part whose every line is a whole record but whose index lists more (a chunk cut
    between records, its size not recorded, as the link stage checks its parts) is damaged."""
    import gzip

    from mmf_uvlp.corpus.shards import part_damage

    part = str(tmp_path / name)
    lines = "".join(json.dumps({"image_id": f"cc_{i}", "phrases": []}) + "\n" for i in range(2))
    with gzip.open(part, "wt") if name.endswith(".gz") else open(part, "w") as handle:
        handle.write(lines)
    assert part_damage(part, 2) is None
    assert part_damage(part, 3) == f"{part} holds 2 records, the index lists 3"
