"""The analysis figures (matplotlib, headless): probe scatter, attention maps, t-SNE panels."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from mmf_uvlp.analysis.grounding import ACTIVE_SHARE  # noqa: E402

ACTIVE_COLOUR, QUIET_COLOUR = "#08519c", "#9ecae1"
MODALITY_MARKERS = {"word": "o", "region": "s", "tag": "^"}


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)
    return path


def _heads_panel(ax, tally: Mapping, title: str, ylim: float) -> None:
    """One tally: accuracy of each head by layer; active heads large and dark."""
    accuracy = np.asarray(tally["accuracy"])
    share = np.asarray(tally["attention_to_regions"])
    for layer in range(accuracy.shape[0]):
        active = share[layer] > ACTIVE_SHARE
        x = np.full(accuracy.shape[1], layer + 1)
        ax.scatter(x[~active], accuracy[layer][~active], s=12, color=QUIET_COLOUR, alpha=0.7)
        ax.scatter(x[active], accuracy[layer][active], s=45, color=ACTIVE_COLOUR)
    ax.axhline(tally["rule_baseline"], color="grey", linewidth=1.2)
    ax.axhline(tally["random_baseline"], color="grey", linewidth=1.0, linestyle="--")
    ax.set_xticks(range(1, accuracy.shape[0] + 1))
    ax.set_xlim(0.5, accuracy.shape[0] + 0.5)
    ax.set_ylim(0, ylim)
    ax.set_title(f"{title} (n={tally['n']})", fontsize=9)


def probe_figure(
    systems: Mapping[str, Mapping], kinds: Sequence[str], path: Path, title: str
) -> Path:
    """Rows = ``kinds`` ("entity" or relations), columns = systems (paper Figs. 3-4)."""

    def tally(summary, kind):
        return summary["entity"] if kind == "entity" else summary["syntactic"][kind]

    names = list(systems)
    top = max(
        max(np.max(tally(s, k)["accuracy"]), tally(s, k)["rule_baseline"])
        for s in systems.values()
        for k in kinds
    )
    ylim = min(100.0, top * 1.15 + 1.0)
    figure, axes = plt.subplots(
        len(kinds),
        len(names),
        squeeze=False,
        sharey=True,
        figsize=(3.6 * len(names) + 1.0, 2.6 * len(kinds) + 0.8),
        layout="constrained",
    )
    for row, kind in enumerate(kinds):
        for column, name in enumerate(names):
            ax = axes[row][column]
            _heads_panel(ax, tally(systems[name], kind), f"{name}: {kind}", ylim)
            if column == 0:
                ax.set_ylabel("accuracy (%)")
            if row == len(kinds) - 1:
                ax.set_xlabel("layer")
    handles = [
        plt.Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            color=ACTIVE_COLOUR,
            markersize=7,
            label=f"head with > {ACTIVE_SHARE:.0%} attention on regions",
        ),
        plt.Line2D(
            [], [], marker="o", linestyle="", color=QUIET_COLOUR, markersize=4, label="other head"
        ),
        plt.Line2D([], [], color="grey", label="most confident region"),
        plt.Line2D([], [], color="grey", linestyle="--", label="random region"),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8)
    figure.suptitle(title, fontsize=11)
    return _save(figure, path)


def attention_map_figure(
    words: Sequence[str],
    rows: Mapping[str, np.ndarray],
    boxes: np.ndarray,
    width: int,
    height: int,
    gold: Sequence[Sequence[Sequence[float]]],
    path: Path,
    title: str,
    image: np.ndarray | None = None,
) -> Path:
    """Rows = systems, columns = words; each cell the regions shaded by the word's attention.

    ``rows[name]`` (words, R) attention weights; the most attended region is outlined in
    black, the gold boxes of word ``w``'s entity (``gold[w]``, empty for words outside
    grounded phrases) in dashed green.
    """
    names = list(rows)
    figure, axes = plt.subplots(
        len(names),
        len(words),
        squeeze=False,
        layout="constrained",
        figsize=(1.9 * len(words), 1.9 * len(names) * height / width + 0.6),
    )
    colours = plt.get_cmap("Reds")
    for r, name in enumerate(names):
        for w, word in enumerate(words):
            ax = axes[r][w]
            if image is not None:
                ax.imshow(image, extent=(0, width, height, 0))
            else:
                ax.add_patch(Rectangle((0, 0), width, height, color="#eeeeee"))
            weights = rows[name][w]
            scale = weights.max() if weights.max() > 0 else 1.0
            for k in np.argsort(weights):  # strongest drawn last, on top
                x1, y1, x2, y2 = boxes[k]
                alpha = float(weights[k] / scale)
                ax.add_patch(
                    Rectangle(
                        (x1, y1),
                        x2 - x1,
                        y2 - y1,
                        facecolor=colours(alpha),
                        alpha=0.05 + 0.75 * alpha,
                        edgecolor=colours(alpha),
                        linewidth=0.5,
                    )
                )
            if weights.max() > 0:  # the prediction: the most attended region
                x1, y1, x2, y2 = boxes[int(np.argmax(weights))]
                ax.add_patch(
                    Rectangle(
                        (x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="black", linewidth=1.4
                    )
                )
            for x1, y1, x2, y2 in gold[w]:
                ax.add_patch(
                    Rectangle(
                        (x1, y1),
                        x2 - x1,
                        y2 - y1,
                        fill=False,
                        edgecolor="#1a9850",
                        linewidth=1.2,
                        linestyle="--",
                    )
                )
            ax.set_xlim(0, width)
            ax.set_ylim(height, 0)
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(word, fontsize=9)
            if w == 0:
                ax.set_ylabel(name, fontsize=9)
    figure.suptitle(title, fontsize=10)
    return _save(figure, path)


def tsne_figure(
    panels: Mapping[str, tuple[np.ndarray, Sequence[str], Sequence[str]]], path: Path, title: str
) -> Path:
    """One panel per system: 2-d points coloured by class, marker by modality."""
    classes = sorted({c for _, labels, _ in panels.values() for c in labels})
    colours = plt.get_cmap("tab20" if len(classes) > 10 else "tab10")
    figure, axes = plt.subplots(
        1, len(panels), squeeze=False, layout="constrained", figsize=(4.6 * len(panels) + 1.6, 4.6)
    )
    for ax, (name, (points, labels, modalities)) in zip(axes[0], panels.items()):
        labels, modalities = np.asarray(labels), np.asarray(modalities)
        for c, cls in enumerate(classes):
            for modality, marker in MODALITY_MARKERS.items():
                keep = (labels == cls) & (modalities == modality)
                if keep.any():
                    ax.scatter(
                        points[keep, 0],
                        points[keep, 1],
                        marker=marker,
                        s=22,
                        color=colours(c % colours.N),
                        alpha=0.8,
                        edgecolors="black" if modality == "region" else "none",
                        linewidths=0.4,
                    )
        ax.set_title(name, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    class_handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=colours(c % colours.N), label=cls)
        for c, cls in enumerate(classes)
    ]
    modality_handles = [
        plt.Line2D([], [], marker=m, linestyle="", color="black", markerfacecolor="none", label=k)
        for k, m in MODALITY_MARKERS.items()
    ]
    figure.legend(handles=class_handles + modality_handles, loc="outside right center", fontsize=8)
    figure.suptitle(title, fontsize=11)
    return _save(figure, path)
