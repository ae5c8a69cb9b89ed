"""What the replication study runs: the paper's tables, their rows and each row's system.

A **system** is one way of pre-training (a config of ``projects/``, or none for Base) plus
the weakly aligned corpus it reads, if any, and the model it fine-tunes. Every system but
the reference models (VisualBERT, ViLBERT, VL-BERT: ``mmf_uvlp/reference_models.py``) is
the ``uvla`` model, fine-tuned by the same ``projects/uvla/finetune/<task>.yaml`` on the four downstream
tasks; a reference model fine-tunes with its own heads and configs under the same budget. A
**table** names its rows (the paper's row labels) and the system behind each; one system
can appear in several tables (μ-VLA is in Tables 1, 2 and 4, mix and paper) and is run once
per seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence


from mmf_uvlp.reference_models import REFERENCE_MODELS, HarnessModel
from mmf_uvlp.reference_models import SYSTEMS as REFERENCE_SYSTEMS
from mmf_uvlp.utils.config_files import home

REPO = home()  # projects/ and configs/: the checkout, or the installed package
RATIOS = (0, 20, 40, 60, 80, 100)
TOP_K = (1, 5, 10)
LINK_NOISE = (25, 50)  # % of R-N's links pointed at another region of their image

_UVLA = "projects/uvla/pretrain.yaml"
_ABLATIONS = "projects/uvla/ablations"
_BASELINES = "projects/baselines"
# How every system but the reference models fine-tunes: the uvla model and its task configs.
UVLA = HarnessModel(
    "uvla",
    "μ-VLA",
    _UVLA,
    "projects/uvla/finetune/{task}.yaml",
    "uvla_final.pth",
    "uvla",
    "model_config.uvla.feature_dim",
)


@dataclass(frozen=True)
class System:
    """``key``: its run folder and ``--systems`` name; ``config``: its pre-training config
    (relative to the repository, None = no pre-training); ``corpus``: the corpus folder
    of the world it reads (None: it reads the image pool and text files directly);
    ``model``: how it fine-tunes (configs, the weights file its pre-training writes, how
    fine-tuning and the split inference load weights, the feature size option): ``uvla``'s
    but for the reference models; ``updates``: its pre-training's updates as a multiple of
    the study's (its schedule alike: 10 % warm-up, four checkpoints; the same fine-tuning)."""

    key: str
    name: str
    config: str | None
    corpus: str | None = None
    model: HarnessModel = UVLA
    updates: int = 1


@dataclass(frozen=True)
class Ordering:
    """The paper's finding that system ``above`` (a key) has a higher Meta-Ave than
    ``below``, with the paper's two Meta-Aves (``paper``: above's, below's)."""

    above: str
    below: str
    paper: tuple[float, float]


@dataclass(frozen=True)
class StudyTable:
    """A table of the paper: ``rows`` are (row label, system key); ``compact`` tables show
    one RefCOCO+ column (val, the paper's "Devs") as Tables 3-4 do; ``x`` (one value per
    row) and ``x_label`` make its figure a Meta-Ave curve instead of bars; ``orderings``:
    the paper's findings between its rows, each read against the measured gap."""

    key: str
    title: str
    rows: tuple[tuple[str, str], ...]
    compact: bool = False
    x: tuple[float, ...] | None = None
    x_label: str | None = None
    orderings: tuple[Ordering, ...] = ()

    @property
    def stem(self) -> str:
        """File name (without suffix) of its markdown and figure."""
        return f"table{self.key}" if self.key.isdigit() else f"table_{self.key}"

    def systems(self) -> list[str]:
        return [system for _, system in self.rows]


SYSTEMS: dict[str, System] = {
    s.key: s
    for s in (
        System("base", "Base", None),
        System("u_visualbert", "U-VisualBERT", f"{_BASELINES}/u_visualbert/pretrain.yaml"),
        System("random_pairs", "Random pairs", f"{_BASELINES}/random_pairs/pretrain.yaml"),
        System("uvla", "μ-VLA", _UVLA, "corpus"),
        System("aligned_vlp", "Aligned VLP", f"{_BASELINES}/aligned_vlp/pretrain.yaml"),
        *(
            System(
                key,
                REFERENCE_SYSTEMS[key].name,
                REFERENCE_SYSTEMS[key].pretrain_config,
                model=REFERENCE_SYSTEMS[key],
            )
            for key in REFERENCE_MODELS
        ),
        System("rt", "μ-VLA (R-T)", f"{_ABLATIONS}/rt.yaml", "corpus"),
        System("rn", "μ-VLA (R-N)", f"{_ABLATIONS}/rn.yaml", "corpus"),
        System("is", "μ-VLA (I-S)", f"{_ABLATIONS}/is.yaml", "corpus"),
        System("rt_rn", "μ-VLA (R-T + R-N)", f"{_ABLATIONS}/rt_rn.yaml", "corpus"),
        System("no_witm", "μ-VLA w/o w_ITM", f"{_ABLATIONS}/no_witm.yaml", "corpus"),
        System("equal_mix", "μ-VLA, equal mix", f"{_ABLATIONS}/equal_mix.yaml", "corpus"),
        System(
            "curriculum_early",
            "μ-VLA, w_ITM from m = 0.05",
            f"{_ABLATIONS}/curriculum_early.yaml",
            "corpus",
        ),
        System(
            "uvla_paper",
            "μ-VLA, the paper's settings",
            f"{_ABLATIONS}/paper_settings.yaml",
            "corpus_k10",
        ),
        System("uvla_bc", "μ-VLA_BC", f"{_BASELINES}/uvla_bc/pretrain.yaml", "corpus_bc"),
        System(
            "random_pairs_bc",
            "Random pairs (narrative text)",
            f"{_BASELINES}/uvla_bc/random_pairs.yaml",
        ),
        System("round_robin", "Round-robin MLM+MRM", f"{_BASELINES}/round_robin/pretrain.yaml"),
        *(
            System(
                f"true_pairs_{r}",
                f"{r}% true pairs",
                f"{_BASELINES}/paired_ratio/true_pairs_{r}.yaml",
            )
            for r in RATIOS
        ),
        *(
            System(f"topk{k}", f"μ-VLA top-{k}", f"{_ABLATIONS}/topk{k}.yaml", "corpus_k10")
            for k in TOP_K
        ),
        *(
            System(
                f"link_noise{p}",
                f"μ-VLA, {p} % of links random",
                f"{_ABLATIONS}/link_noise{p}.yaml",
                "corpus",
            )
            for p in LINK_NOISE
        ),
        System("uvla_2x", "μ-VLA, twice the updates", _UVLA, "corpus", updates=2),
        System(
            "aligned_vlp_2x",
            "Aligned VLP, twice the updates",
            f"{_BASELINES}/aligned_vlp/pretrain.yaml",
            updates=2,
        ),
    )
}

# The paper's Meta-Aves (its Tables 1-6; the random pairs of Table 1 are its Table 5's joint
# MLM + MRM on shuffled captions) and the orderings it reports between them.
PAPER_META = {
    "base": 65.9,
    "u_visualbert": 70.0,
    "random_pairs": 68.1,
    "uvla": 75.8,
    "aligned_vlp": 77.3,
    "rt": 69.5,
    "rn": 73.7,
    "is": 73.9,
    "rt_rn": 75.0,
    "random_pairs_bc": 68.3,
    "uvla_bc": 73.8,
    "no_witm": 75.3,
    "round_robin": 67.4,
    **{f"true_pairs_{r}": m for r, m in zip(RATIOS, (68.1, 73.5, 74.5, 76.0, 76.8, 77.3))},
}


def _above(*pairs: tuple[str, str]) -> tuple[Ordering, ...]:
    return tuple(Ordering(a, b, (PAPER_META[a], PAPER_META[b])) for a, b in pairs)


TABLES: dict[str, StudyTable] = {
    t.key: t
    for t in (
        StudyTable(
            "1",
            "Table 1. μ-VLA against the baselines and the reference models",
            (
                ("Base", "base"),
                ("U-VisualBERT", "u_visualbert"),
                ("Random pairs", "random_pairs"),
                ("μ-VLA", "uvla"),
                ("Aligned VLP", "aligned_vlp"),
                ("VisualBERT", "visual_bert"),
                ("ViLBERT", "vilbert"),
                ("VL-BERT", "vl_bert"),
            ),
            orderings=_above(
                ("u_visualbert", "base"),
                ("random_pairs", "base"),
                ("uvla", "base"),
                ("aligned_vlp", "base"),
                ("uvla", "u_visualbert"),
                ("uvla", "random_pairs"),
                ("aligned_vlp", "uvla"),
            ),
        ),
        StudyTable(
            "2",
            "Table 2. Granularity of the alignment: R-T, R-N, I-S",
            (
                ("μ-VLA (R-T)", "rt"),
                ("μ-VLA (R-N)", "rn"),
                ("μ-VLA (I-S)", "is"),
                ("μ-VLA (R-T + R-N)", "rt_rn"),
                ("μ-VLA (R-T + R-N + I-S)", "uvla"),
            ),
            orderings=_above(
                ("rt_rn", "rt"), ("uvla", "rt_rn"), ("uvla", "rt"), ("uvla", "rn"), ("uvla", "is")
            ),
        ),
        StudyTable(
            "3",
            "Table 3. Realistic setting: narrative (BookCorpus-like) text only",
            (("random", "random_pairs_bc"), ("proposed (μ-VLA_BC)", "uvla_bc")),
            compact=True,
            orderings=_above(("uvla_bc", "random_pairs_bc")),
        ),
        StudyTable(
            "4",
            "Table 4. Weighted ITM",
            (("w/o w_ITM", "no_witm"), ("w_ITM", "uvla")),
            compact=True,
            orderings=_above(("uvla", "no_witm")),
        ),
        StudyTable(
            "5",
            "Table 5. Joint vs round-robin MLM + MRM on shuffled captions",
            (("Round-Robin MLM+MRM", "round_robin"), ("Joint MLM+MRM", "true_pairs_0")),
            orderings=_above(("true_pairs_0", "round_robin")),
        ),
        StudyTable(
            "6",
            "Table 6. Ratio of true image-caption pairs (Fig. 1)",
            tuple((f"{r}%", f"true_pairs_{r}") for r in RATIOS),
            x=tuple(float(r) for r in RATIOS),
            x_label="true pairs (%)",
            orderings=_above(
                *(
                    (f"true_pairs_{high}", f"true_pairs_{low}")
                    for low, high in zip(RATIOS, RATIOS[1:])
                )
            ),
        ),
        StudyTable(
            "topk",
            "Top-K retrieved sentences per image (Fig. 3)",
            tuple((f"K = {k}", f"topk{k}") for k in TOP_K),
            x=tuple(float(k) for k in TOP_K),
            x_label="K (retrieved sentences per image)",
        ),
        StudyTable(
            "mix",
            "Mix of R-T, R-N and I-S batches (the paper sums the three losses)",
            (("size-proportional", "uvla"), ("equal", "equal_mix")),
            compact=True,
        ),
        StudyTable(
            "paper",
            "μ-VLA with the paper's settings: K = 5, an equal mix, w_ITM over "
            "about 95 % of training",
            (
                ("calibrated (K = 2, size-proportional, m = 0.5)", "uvla"),
                ("K = 5", "topk5"),
                ("equal mix", "equal_mix"),
                ("m = 0.05", "curriculum_early"),
                ("all three", "uvla_paper"),
            ),
            compact=True,
        ),
        StudyTable(
            "links",
            "Link quality: μ-VLA with R-N's phrase-region links made noisier, against Aligned VLP",
            (
                ("links as built", "uvla"),
                *((f"{p} % of links to another region", f"link_noise{p}") for p in LINK_NOISE),
                ("Aligned VLP (true captions)", "aligned_vlp"),
            ),
            compact=True,
        ),
        StudyTable(
            "budget",
            "Twice the pre-training updates: μ-VLA and Aligned VLP",
            (
                ("μ-VLA", "uvla"),
                ("μ-VLA, twice the updates", "uvla_2x"),
                ("Aligned VLP", "aligned_vlp"),
                ("Aligned VLP, twice the updates", "aligned_vlp_2x"),
            ),
            compact=True,
        ),
    )
}


def _names(text: str | Sequence[str] | None) -> list[str]:
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    return [item.strip() for item in items if item.strip()]


def select(
    tables: str | Sequence[str] | None = None, systems: str | Sequence[str] | None = None
) -> tuple[list[StudyTable], list[System]]:
    """The tables to write and the systems to run, in table order.

    ``tables``: keys of :data:`TABLES` (None: all); ``systems``: keys of :data:`SYSTEMS`
    restricting the rows (None: every row of the tables). A table none of whose rows is
    selected is left out.
    """
    table_keys, system_keys = _names(tables) or list(TABLES), _names(systems)
    unknown = [k for k in table_keys if k not in TABLES]
    if unknown:
        raise ValueError(f"--tables: unknown {unknown}; expected keys from {list(TABLES)}")
    unknown = [k for k in system_keys if k not in SYSTEMS]
    if unknown:
        raise ValueError(f"--systems: unknown {unknown}; expected keys from {list(SYSTEMS)}")
    chosen = [TABLES[k] for k in table_keys]
    ordered = list(dict.fromkeys(s for t in chosen for s in t.systems()))
    if system_keys:
        missing = [k for k in system_keys if k not in ordered]
        if missing:
            raise ValueError(
                f"--systems {missing} are in none of the tables {table_keys}; "
                f"their tables: {_tables_of(missing)}"
            )
        ordered = [s for s in ordered if s in system_keys]
    chosen = [t for t in chosen if any(s in ordered for s in t.systems())]
    return chosen, [SYSTEMS[k] for k in ordered]


def _tables_of(systems: Iterable[str]) -> dict[str, list[str]]:
    return {s: [t.key for t in TABLES.values() if s in t.systems()] for s in systems}


def config_value(path: Path, keys: Sequence[str]) -> object:
    """The value at ``keys`` (nested) of the config ``path`` as MMF reads it: its
    ``includes`` merged by MMF's own ``load_yaml`` (the file's value wins, a later include
    over an earlier one); None: unset."""
    from omegaconf import OmegaConf

    from mmf.utils.configuration import load_yaml

    value: object = OmegaConf.to_container(load_yaml(str(path)), resolve=False)
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _config_path(path: str | Path) -> Path:
    return Path(path) if Path(path).is_absolute() else REPO / path


def config_datasets(path: str | Path) -> list[str]:
    """The ``datasets`` a config trains on (following its ``includes``)."""
    value = config_value(_config_path(path), ["datasets"])
    return _names(None if value is None else str(value))


def config_model(path: str | Path) -> str:
    """The ``model`` a config trains (following its ``includes``): MMF names the weights
    it writes at the end of the run ``<model>_final.pth``."""
    value = config_value(_config_path(path), ["model"])
    if not isinstance(value, str) or not value:
        raise ValueError(f"{_config_path(path)}: no model: key (in it or its includes)")
    return value
