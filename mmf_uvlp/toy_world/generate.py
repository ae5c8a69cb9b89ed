"""Generate a whole world into a directory and describe it in ``world.json``.

Every random choice comes from a ``numpy`` generator seeded by ``(seed, stream name)``
and, for per-image draws, the image id: the same config gives the same bytes, and
changing the size of one part does not change the others.

A world is written into a temporary folder next to the output (``.<name>.partial``) and
moved in place at the end, so a killed run leaves the output as it was (the next run
removes the leftover folder). ``world_files.txt`` lists every file the generator wrote;
replacing a world (``overwrite``) removes only those files, and ``world.json`` is moved
in last, so a folder with ``world.json`` holds a complete world. The list is checked before
anything is removed or written (:mod:`mmf_uvlp.utils.output_folder`): an entry outside the
world (absolute, ``..``) or a symbolic link on an entry's way (``text/`` linked to a user's
folder) is refused, naming the list, the line and the entry.
"""

from __future__ import annotations

import os
import shutil
import zlib
from collections import Counter
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator

import numpy as np
from tqdm import tqdm

from mmf_uvlp.toy_world import downstream as ds
from mmf_uvlp.toy_world.config import WorldConfig
from mmf_uvlp.toy_world.detector import DetectorConfig, FeatureModel, detect
from mmf_uvlp.toy_world.entities import write_flickr30k_entities
from mmf_uvlp.toy_world.scene import Scene, SceneSpec, sample_scene
from mmf_uvlp.toy_world.text import CAPTION_STYLES, narrative_sentence, tokenize
from mmf_uvlp.toy_world.vocabulary import CLASSES, vocabulary_json
from mmf_uvlp.toy_world.writers import (
    PoolWriter,
    write_json,
    write_lines,
    write_object_npy,
    write_pickle,
    dumps,
)
from mmf_uvlp.errors import UnsafeOutputPath
from mmf_uvlp.utils.atomic import atomic_path
from mmf_uvlp.utils.output_folder import check_no_link_on_the_way, read_file_list

FORMAT_VERSION = 1
MANIFEST = "world.json"
FILE_LIST = "world_files.txt"  # every file of the world but these two, one per line
PRETRAIN_POOL = "cc"
TAG_FILTER = {"min_conf": 0.3, "min_area_ratio": 0.01}


class Streams:
    """Independent random generators named by strings, all derived from one seed."""

    def __init__(self, seed: int):
        self.seed = seed

    def __call__(self, *names: str) -> np.random.Generator:
        return np.random.default_rng([self.seed] + [zlib.crc32(n.encode("utf-8")) for n in names])


class WorldGenerator:
    """Writes the pools, text, downstream sets and manifest of one world."""

    def __init__(self, config: WorldConfig, out: Path, progress: bool = False):
        self.config, self.out, self.progress = config, Path(out), progress
        self.rng = Streams(config.seed)
        self.classes = config.class_set()
        self.detector = DetectorConfig(max_regions=config.max_regions)
        self.features = (
            FeatureModel(self.rng("features"), config.feature_dim) if config.features else None
        )
        self.paths: dict = {}
        self.counts: dict = {"pools": {}}

    def scene(self, image_id: str, spec: SceneSpec | None = None) -> Scene:
        return sample_scene(self.rng("scene", image_id), self.classes, image_id, spec)

    def _bar(self, items: Iterable, total: int, desc: str):
        return tqdm(
            items, total=total, desc=desc, disable=not self.progress, unit="img", leave=False
        )

    def write_pool(self, pool: str, scenes: Iterator[Scene], total: int) -> dict[str, str]:
        vinvl = pool == PRETRAIN_POOL or self.config.vinvl_features_all_pools
        writer = PoolWriter(self.out, pool, self.config.features, vinvl, self.config.npy)
        for scene in self._bar(scenes, total, f"pool {pool}"):
            det = detect(
                self.rng("detect", scene.image_id),
                self.classes,
                scene,
                self.detector,
                self.features,
            )
            writer.write(scene.to_json(), det)
        paths = writer.close()
        self.counts["pools"][pool] = {"images": writer.num_images, "regions": writer.num_regions}
        return paths

    # ------------------------------------------------------------------ pre-training

    def pretraining(self) -> None:
        n = self.config.num_images
        ids = [f"{PRETRAIN_POOL}_{k:06d}" for k in range(n)]
        captions: list[str] = []
        describe = CAPTION_STYLES[self.config.caption_style]

        def scenes() -> Iterator[Scene]:
            for image_id in ids:
                scene = self.scene(image_id)
                captions.append(describe(self.rng("caption", image_id), scene))
                yield scene

        pool_paths = self.write_pool(PRETRAIN_POOL, scenes(), n)
        text = self.out / "text"
        write_lines(text / "captions_gt.tsv", (f"{i}\t{c}" for i, c in zip(ids, captions)))
        extra = []
        for k in self._bar(
            range(self.config.extra_captions), self.config.extra_captions, "extra captions"
        ):
            image_id = f"unpooled_{k:06d}"
            extra.append(describe(self.rng("caption", image_id), self.scene(image_id)))
        corpus = captions + extra
        order = self.rng("caption_corpus").permutation(len(corpus))
        write_lines(text / "caption_corpus.txt", (corpus[i] for i in order))
        narrative_rng = self.rng("narrative")
        n_narr = self.config.narrative_sentences
        write_lines(
            text / "narrative_corpus.txt",
            (
                narrative_sentence(narrative_rng, self.classes)
                for _ in self._bar(range(n_narr), n_narr, "narrative")
            ),
        )
        self.paths.update(
            {
                "images_gt": pool_paths["images_gt"],
                "predictions_tsv": pool_paths["predictions_tsv"],
                "detections_jsonl": pool_paths["detections_jsonl"],
                "captions_gt": "text/captions_gt.tsv",
                "caption_corpus": "text/caption_corpus.txt",
                "narrative_corpus": "text/narrative_corpus.txt",
            }
        )
        for key, name in (
            ("features_tsv", "features_tsv"),
            ("lmdb", "pretrain_lmdb"),
            ("npy_dir", "pretrain_npy"),
        ):
            if key in pool_paths:
                self.paths[name] = pool_paths[key]
        self.paths["pools"] = {PRETRAIN_POOL: pool_paths}
        self.counts.update(captions_gt=n, caption_corpus=len(corpus), narrative_corpus=n_narr)

    # ------------------------------------------------------------------ downstream

    def downstream(self) -> None:
        c = self.config
        coco_ids = ds.IdAllocator(self.rng("coco_ids"), 1, 600_000)
        flickr_ids = ds.IdAllocator(self.rng("flickr_ids"), 1_000_000_000, 9_999_999_999)
        classes = self.classes
        vqa_scenes, vqa = ds.build_vqa2(
            self.rng("vqa2"),
            classes,
            dict(zip(ds.VQA_SPLITS, c.vqa2_questions)),
            self.scene,
            coco_ids,
        )
        ref_scenes, refer = ds.build_refcoco(
            self.rng("refcoco+"),
            classes,
            dict(zip(ds.REFCOCO_SPLITS, c.refcoco_images)),
            self.scene,
            coco_ids,
        )
        nlvr_scenes, nlvr = ds.build_nlvr2(
            self.rng("nlvr2"),
            classes,
            dict(zip(ds.NLVR2_SPLITS, c.nlvr2_pairs)),
            self.scene,
            ds.NLVR2_STATEMENTS[c.nlvr2_statements],
            classes.first(c.nlvr2_classes),
            c.nlvr2_classes_percent,
        )
        ve_scenes, ve = ds.build_visual_entailment(
            self.rng("visual_entailment"),
            classes,
            dict(zip(ds.VE_SPLITS, c.ve_hypotheses)),
            self.scene,
            flickr_ids,
        )

        pools = {"coco": vqa_scenes + ref_scenes, "nlvr2": nlvr_scenes, "flickr30k": ve_scenes}
        for pool, scenes in pools.items():
            scenes.sort(key=lambda s: s.image_id.encode("utf-8"))
            self.paths["pools"][pool] = self.write_pool(pool, iter(scenes), len(scenes))

        mmf = self.out / "mmf"
        vqa_paths = {}
        for split, records in vqa.items():
            header = {
                "dataset_name": "vqa2",
                "version": 1,
                "has_answer": True,
                "split": split,
                "source": "mmf_uvlp toy world",
            }
            path = mmf / "vqa2" / "annotations" / f"imdb_{split}.npy"
            write_object_npy(path, [header] + records)
            vqa_paths[split] = self._rel(path)
        write_lines(mmf / "vqa2" / "vocabs" / "answers_vqa.txt", ds.vqa_answer_vocabulary())
        vqa_paths["answers"] = "mmf/vqa2/vocabs/answers_vqa.txt"

        nlvr_paths = {}
        for split, records in nlvr.items():
            path = mmf / "nlvr2" / "annotations" / f"{ds.NLVR2_SPLITS[split]}.jsonl"
            write_lines(path, (dumps(r) for r in records))
            nlvr_paths[split] = self._rel(path)
        ve_paths = {}
        for split, records in ve.items():
            name = {"train": "train", "val": "dev", "test": "test"}[split]
            path = mmf / "visual_entailment" / "annotations" / f"snli_ve_{name}.jsonl"
            write_lines(path, (dumps(r) for r in records))
            ve_paths[split] = self._rel(path)
        self.paths["flickr30k_entities"] = write_flickr30k_entities(
            self.out, self.rng, pools["flickr30k"], ve
        )

        refer_dir = self.out / "refer" / "refcoco+"
        write_pickle(refer_dir / "refs(unc).p", refer.refs)
        write_json(refer_dir / "instances.json", refer.instances_json(), indent=None)
        ref_paths = {
            "root": "refer",
            "refs": "refer/refcoco+/refs(unc).p",
            "instances": "refer/refcoco+/instances.json",
        }

        words = Counter()
        for records in vqa.values():
            words.update(t for r in records for t in r["question_tokens"])
        for records in nlvr.values():
            words.update(t for r in records for t in tokenize(r["sentence"]))
        for records in ve.values():
            words.update(t for r in records for t in tokenize(r["sentence2"]))
        for ref in refer.refs:
            words.update(t for s in ref["sentences"] for t in s["tokens"])
        write_lines(mmf / "vocabs" / "vocabulary_toy.txt", sorted(words))

        for task, paths, pool in (
            ("vqa2", vqa_paths, "coco"),
            ("nlvr2", nlvr_paths, "nlvr2"),
            ("visual_entailment", ve_paths, "flickr30k"),
            ("refcoco+", ref_paths, "coco"),
        ):
            paths["pool"] = pool
            pool_paths = self.paths["pools"][pool]
            if "lmdb" in pool_paths:
                paths["features_lmdb"] = pool_paths["lmdb"]
            if "npy_dir" in pool_paths:
                paths["features_npy"] = pool_paths["npy_dir"]
            self.paths[task] = paths
        self.paths["mmf_data_dir"] = "."
        self.paths["mmf_vocabulary"] = "mmf/vocabs/vocabulary_toy.txt"
        self.counts.update(
            vqa2={s: len(r) for s, r in vqa.items()},
            nlvr2={s: len(r) for s, r in nlvr.items()},
            visual_entailment={s: len(r) for s, r in ve.items()},
            **{
                "refcoco+": {
                    "refs": {
                        s: sum(r["split"] == s for r in refer.refs) for s in ds.REFCOCO_SPLITS
                    },
                    "sentences": {
                        s: sum(len(r["sentences"]) for r in refer.refs if r["split"] == s)
                        for s in ds.REFCOCO_SPLITS
                    },
                    "images": len(refer.images),
                }
            },
        )

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.out).as_posix()

    def run(self) -> dict:
        """Write everything; returns the manifest (also written to ``world.json``)."""
        self.out.mkdir(parents=True, exist_ok=True)
        write_json(self.out / "vocabulary.json", vocabulary_json(self.classes))
        self.paths["vocabulary"] = "vocabulary.json"
        self.pretraining()
        if self.config.downstream:
            self.downstream()
        manifest = {
            "format_version": FORMAT_VERSION,
            "generator": "mmf_uvlp.toy_world",
            "preset": self.config.preset,
            "seed": self.config.seed,
            "feature_dim": self.config.feature_dim if self.config.features else None,
            "num_classes": len(CLASSES),
            "cls_prob_columns": len(CLASSES) + 1,
            "active_classes": self.classes.names,
            "pretrain_pool": PRETRAIN_POOL,
            "tag_filter": TAG_FILTER,
            "detector": asdict(self.detector),
            "config": self.config.to_json(),
            "counts": self.counts,
            "paths": self.paths,
            "file_list": FILE_LIST,
        }
        write_lines(
            self.out / FILE_LIST,
            sorted(p.relative_to(self.out).as_posix() for p in self.out.rglob("*") if p.is_file()),
        )
        write_json(self.out / MANIFEST, manifest)
        return manifest


def generate_world(
    config: WorldConfig, out: str | Path, progress: bool = False, overwrite: bool = False
) -> dict:
    """Generate the world described by ``config`` into ``out``; returns the manifest.

    ``out`` must be missing or empty, or (with ``overwrite``) hold a generated world,
    whose files are replaced; files the generator did not write are left alone.
    """
    out = Path(out).resolve()
    check_output(out, overwrite)
    partial = out.parent / f".{out.name}.partial"
    if partial.is_symlink():
        raise UnsafeOutputPath(
            f"{partial} (where a world is written before it is moved in) "
            "is a symbolic link; remove it"
        )
    if partial.exists():
        shutil.rmtree(partial)  # left by a killed run
    partial.mkdir(parents=True)
    manifest = WorldGenerator(config, partial, progress).run()
    _move_in(partial, out)
    return manifest


def check_output(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that is a file, or a non-empty folder not holding a world, or whose
    file list names a file outside it or reached through a symbolic link
    (:class:`~mmf_uvlp.errors.UnsafeOutputPath`, a ``ValueError``)."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{out} is not empty (pass --overwrite to replace a previously generated world)"
            )
        if not (out / MANIFEST).is_file():
            raise FileExistsError(
                f"{out} has no {MANIFEST}; refusing to write into a "
                "directory that is not a generated world"
            )
        _listed(out)


def _listed(root: Path) -> set[str]:
    """The files a world in ``root`` lists (none for a world older than its file list),
    each checked to lie inside ``root`` with no symbolic link on its way."""
    return {path.relative_to(root).as_posix() for path in read_file_list(root, root / FILE_LIST)}


def _move_in(partial: Path, out: Path) -> None:
    """Move the finished world in ``partial`` to ``out``, replacing only a world's files."""
    if not out.is_dir() or not any(out.iterdir()):
        if out.is_dir():
            out.rmdir()
        os.rename(partial, out)  # atomic: the whole world appears at once
        return
    old, new = _listed(out), _listed(partial)
    for rel in sorted(new - old):  # the old ones were checked by _listed
        check_no_link_on_the_way(out, PurePosixPath(rel), f"{out}: new world file {rel!r}")
    # while files move, the list in ``out`` covers both worlds: a killed move is redone
    (out / f"{FILE_LIST}.tmp").unlink(missing_ok=True)  # a link there is not written through
    with atomic_path(out / FILE_LIST, temporary=out / f"{FILE_LIST}.tmp") as temporary:
        write_lines(Path(temporary), sorted(old | new))
    for rel in sorted(old - new):
        (out / rel).unlink(missing_ok=True)
        for parent in (out / rel).parents:  # folders left empty
            if parent == out or parent.is_dir() and any(parent.iterdir()):
                break
            if parent.is_dir():
                parent.rmdir()
    for rel in sorted(new) + [FILE_LIST, MANIFEST]:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial / rel, out / rel)
    shutil.rmtree(partial)
