"""The build report: counts in and out, skipped items and why, scores, quality, examples.

Written to ``<out>/report/``:

* ``report.json`` — every number (deterministic: the same inputs give the same file; timings
  go to ``<out>/timings.json`` instead);
* ``report.md`` — the same, readable;
* ``scores_hist.png`` — histogram of the cosine scores of all retrieved sentences;
* ``examples.html`` / ``examples.md`` — the first ``report.num_examples`` images: tag query,
  regions, retrieved sentences with their noun phrases, linked ones highlighted with the
  region they point to (the paper's Fig. 4).

Everything is aggregated from the per-chunk ``stats/chunk-*.json`` files, so a merged output's
report equals a single run's.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import os
from typing import Dict, List, Optional

from mmf_uvlp.corpus.sentences import read_json
from mmf_uvlp.utils.atomic import atomic_path, atomic_write_bytes, atomic_write_json
from mmf_uvlp.utils.error_policy import ErrorPolicy


def _ratio(a: float, b: float) -> Optional[float]:
    return round(a / b, 6) if b else None


def link_score_band(score: float, width: float = 0.05) -> str:
    """The ``[lo, hi)`` band of ``width`` a link score falls in (1.0, an exact label match,
    is a band of its own), as the link-precision breakdown reports it."""
    if score >= 1.0:
        return "1.00"
    lo = math.floor(score / width) * width
    return f"[{lo:.2f}, {lo + width:.2f})"


def _by_band(link: Dict[str, int]) -> List[Dict[str, object]]:
    """Link precision per link-score band, from the ``gt_linked@<band>`` counters."""
    bands = sorted(
        (key.split("@", 1)[1] for key in link if key.startswith("gt_linked@")),
        key=lambda band: 1.0 if band == "1.00" else float(band[1:5]),
    )
    return [
        {
            "link_score": band,
            "linked": link[f"gt_linked@{band}"],
            "precision": _ratio(link.get(f"gt_correct@{band}", 0), link[f"gt_linked@{band}"]),
        }
        for band in bands
    ]


def aggregate(out_dir: str, meta: Dict[str, object], shared: Dict[str, object], config) -> Dict:
    total = meta["total_chunks"]
    det = {"rows": 0, "images": 0, "dropped_no_tags": 0, "regions": 0, "tags": 0}
    skipped = ErrorPolicy("skip")
    ret = {
        "queries": 0,
        "retrieved": 0,
        "short": 0,
        "own_caption_dropped": 0,
        "score_sum": 0.0,
        "top1_sum": 0.0,
    }
    hist: Optional[List[int]] = None
    recall_n, recall_sum = 0, 0.0
    gt = {"images_with_caption": 0, "caption_in_pool": 0, "hits": None}
    link: Dict[str, int] = {}
    feature_dim = None
    for c in range(total):
        stats = read_json(os.path.join(out_dir, "stats", f"chunk-{c:06d}.json"))
        if stats is None:
            raise RuntimeError(f"{out_dir}: stats of chunk {c} missing; is the build finished?")
        d = stats["detections"]
        for key in det:
            det[key] += d.get(key, 0)
        feature_dim = feature_dim or d.get("feature_dim")
        skipped.merge(ErrorPolicy.from_dict(d["skipped"]))
        r = stats["retrieval"]
        for key in ret:
            ret[key] += r.get(key, 0)
        hist = r["histogram"] if hist is None else [a + b for a, b in zip(hist, r["histogram"])]
        if "recall_sample" in r:
            recall_n += r["recall_sample"]["n"]
            recall_sum += r["recall_sample"]["sum"]
        if "gt" in r:
            gt["images_with_caption"] += r["gt"]["images_with_caption"]
            gt["caption_in_pool"] += r["gt"]["caption_in_pool"]
            hits = r["gt"]["hits"]
            gt["hits"] = hits if gt["hits"] is None else [a + b for a, b in zip(gt["hits"], hits)]
        for key, value in stats["link"].items():
            link[key] = link.get(key, 0) + value
    sentences = shared.get("sentences") or {}
    for source in (sentences, shared.get("ground_truth") or {}):
        if source.get("skipped"):
            skipped.merge(ErrorPolicy.from_dict(source["skipped"]))
    k = meta["k"]
    cfg_r = config.retrieve
    quality: Dict[str, object] = {}
    if config.inputs.captions_gt:
        if cfg_r.exclude_own_caption:
            quality["caption_recall"] = "not measured: own captions are excluded"
        else:
            hits = gt["hits"] or [0] * k
            quality["caption_recall"] = {
                "definition": "share of images whose true caption is in the pool and among "
                "the top-k retrieved (normalised text match)",
                "images_with_caption": gt["images_with_caption"],
                "caption_in_pool": gt["caption_in_pool"],
                **{
                    f"recall@{r + 1}": _ratio(hits[r], gt["caption_in_pool"])
                    for r in range(len(hits))
                },
            }
    if config.inputs.objects_gt:
        quality["link_precision"] = {
            "definition": "linked phrases whose region label is a true object class of the "
            "image and is mentioned in the phrase / linked phrases (images with "
            "ground-truth objects)",
            "linked": link.get("gt_linked", 0),
            "precision": _ratio(link.get("gt_correct", 0), link.get("gt_linked", 0)),
            "grounded_rate": _ratio(link.get("gt_grounded", 0), link.get("gt_linked", 0)),
            "by_link_score": _by_band(link),
        }
    from mmf_uvlp.corpus.retrieve import resolve_index_kind

    kind = resolve_index_kind(
        cfg_r.index, int(sentences.get("counts", {}).get("sentences") or 0), cfg_r.exact_max
    )
    retrieval = {
        "index": kind,
        "k": k,
        "queries": ret["queries"],
        "retrieved": ret["retrieved"],
        "images_short_of_k": ret["short"],
        "own_caption_dropped": ret["own_caption_dropped"],
        "mean_score": _ratio(ret["score_sum"], ret["retrieved"]),
        "mean_top1_score": _ratio(ret["top1_sum"], ret["queries"]),
        "histogram": {"edges": [-1.0, 1.0], "bins": len(hist or []), "counts": hist or []},
    }
    if cfg_r.index == "auto":
        retrieval["index_setting"] = (
            f"auto: exact up to {cfg_r.exact_max} corpus sentences (retrieve.exact_max), hnsw above"
        )
    if kind != "flat":
        retrieval["recall_vs_exact"] = {
            "definition": "share of the k sentences retrieval over an exact search gives "
            "(same exclusions) that the index's retrieval gave (a tie with the "
            "exact k-th score counts), on a seeded sample of queries",
            "sample": recall_n,
            f"recall@{k}": _ratio(recall_sum, recall_n),
        }
    return {
        "fingerprint": meta["fingerprint"],
        "inputs": {
            "detection_rows": shared["detections"]["positions"],
            "feature_dim": feature_dim,
            "corpus_lines": sentences.get("counts", {}).get("lines"),
            "corpus_sentences": sentences.get("counts", {}).get("sentences"),
            "corpus_distinct_texts": sentences.get("counts", {}).get("distinct_texts"),
        },
        "detections": {
            **det,
            "images_out": det["images"],
            "mean_tags": _ratio(det["tags"], det["images"]),
        },
        "skipped": skipped.to_dict(),
        "retrieval": retrieval,
        "phrases": {
            "sentences_out": link.get("sentences", 0),
            "noun_phrases": link.get("phrases", 0),
            "linked": link.get("linked", 0),
            "linked_rate": _ratio(link.get("linked", 0), link.get("phrases", 0)),
            "without_vector": link.get("no_vector", 0),
            "mention_rate": _ratio(link.get("mention", 0), link.get("linked", 0)),
        },
        "quality": quality,
        "output": {"images": det["images"], "chunks": total, "format": meta["format"]},
    }


def _markdown(report: Dict[str, object]) -> str:
    lines = ["# Weakly aligned corpus: build report", ""]
    inp, det, ret, ph = (
        report["inputs"],
        report["detections"],
        report["retrieval"],
        report["phrases"],
    )
    lines += [
        "## Counts",
        "",
        "| what | count |",
        "|---|---|",
        f"| detection rows read | {inp['detection_rows']} |",
        f"| images written | {det['images_out']} |",
        f"| images dropped: no tag after filtering | {det['dropped_no_tags']} |",
        f"| corpus lines / sentences / distinct texts | {inp['corpus_lines']} / "
        f"{inp['corpus_sentences']} / {inp['corpus_distinct_texts']} |",
        f"| retrieved sentences (k={ret['k']}) | {ret['retrieved']} |",
        f"| images with fewer than k | {ret['images_short_of_k']} |",
        f"| own captions excluded | {ret['own_caption_dropped']} |",
        f"| noun phrases / linked | {ph['noun_phrases']} / {ph['linked']} |",
        "",
    ]
    lines += ["## Skipped input (on_error=skip)", ""]
    counts = report["skipped"]["counts"]
    if not counts:
        lines += ["Nothing skipped.", ""]
    else:
        lines += ["| reason | count | first examples |", "|---|---|---|"]
        for reason, n in counts.items():
            ex = "<br>".join(
                html.escape(e) for e in report["skipped"]["examples"].get(reason, [])[:3]
            )
            lines.append(f"| {reason} | {n} | {ex} |")
        lines.append("")
    lines += [
        "## Retrieval",
        "",
        f"index: `{ret['index']}`, mean score {ret['mean_score']}, "
        f"mean top-1 score {ret['mean_top1_score']}",
        "",
        "![retrieval scores](scores_hist.png)",
        "",
    ]
    if "index_setting" in ret:
        lines += [f"index chosen by corpus size ({ret['index_setting']})", ""]
    if "recall_vs_exact" in ret:
        rec, key = ret["recall_vs_exact"], f"recall@{ret['k']}"
        lines += [
            f"{key} of the `{ret['index']}` index against exact search: **{rec[key]}** "
            f"on {rec['sample']} sampled queries ({rec['definition']})",
            "",
        ]
    lines += [
        "## Phrases",
        "",
        f"linked rate {ph['linked_rate']}, mention rate "
        f"{ph['mention_rate']} (linked phrases naming their region's label)",
        "",
    ]
    if report["quality"]:
        lines += [
            "## Quality against ground truth",
            "",
            "```",
            json.dumps(report["quality"], indent=1),
            "```",
            "",
        ]
    lines += ["Examples: [examples.html](examples.html), [examples.md](examples.md)", ""]
    return "\n".join(lines)


def _histogram_png(path: str, counts: List[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = len(counts)
    edges = [-1 + 2 * i / bins for i in range(bins + 1)] if bins else [-1, 1]
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    if bins:
        ax.bar(edges[:-1], counts, width=2 / bins, align="edge", color="#4c72b0")
        nonzero = [i for i, c in enumerate(counts) if c]
        if nonzero:
            ax.set_xlim(edges[max(0, nonzero[0] - 1)], edges[min(bins, nonzero[-1] + 2)])
    ax.set_xlabel("cosine(tag query, sentence)")
    ax.set_ylabel("retrieved sentences")
    ax.set_title("Retrieval scores")
    fig.tight_layout()
    with atomic_path(path, extension=".png") as temporary:
        fig.savefig(temporary, metadata={"Software": None})
    plt.close(fig)


def _highlight(text: str, phrases: List[Dict[str, object]], regions, markdown: bool) -> str:
    out, last = [], 0
    for ph in sorted(phrases, key=lambda p: p["char_span"][0]):
        s, e = ph["char_span"]
        esc = (lambda t: t) if markdown else html.escape
        out.append(esc(text[last:s]))
        piece = text[s:e]
        if ph["linked"]:
            label = regions[ph["region"]]["label"]
            if markdown:
                out.append(f"**[{piece}]→{label}#{ph['region']}**")
            else:
                out.append(
                    f'<span class="linked" title="region {ph["region"]} ({html.escape(label)}),'
                    f' similarity {ph["similarity"]}">{html.escape(piece)}'
                    f"<sub>{html.escape(label)}#{ph['region']}</sub></span>"
                )
        else:
            out.append(
                f"_{piece}_" if markdown else f'<span class="np">{html.escape(piece)}</span>'
            )
        last = e
    out.append(text[last:] if markdown else html.escape(text[last:]))
    return "".join(out)


def _examples(records: List[Dict[str, object]]) -> tuple:
    css = (
        "body{font-family:sans-serif;max-width:1000px;margin:auto}"
        ".img{border:1px solid #ccc;padding:8px;margin:12px 0}"
        ".linked{background:#b6e3b6;border-radius:3px;padding:0 2px}"
        ".np{border-bottom:1px dashed #999}.tag{color:#555}sub{color:#276627}"
    )
    h = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Retrieved examples</title>",
        f"<style>{css}</style></head><body><h1>Weakly aligned corpus: examples</h1>",
        "<p>Green: noun phrase linked to a region (label#index); dashed: not linked.</p>",
    ]
    md = [
        "# Weakly aligned corpus: examples",
        "",
        "**[phrase]→label#region**: linked; _phrase_: not linked.",
        "",
    ]
    for rec in records:
        regions = rec["regions"]
        objs = ", ".join(f"{r['label']} ({r['conf']:.2f})" for r in regions[:20])
        h.append(
            f"<div class='img'><h3>{html.escape(str(rec['image_id']))}</h3>"
            f"<p class='tag'>tag query: <b>{html.escape(rec['tag_query'])}</b></p>"
            f"<p class='tag'>regions: {html.escape(objs)}</p><ol>"
        )
        md += [
            f"## {rec['image_id']}",
            "",
            f"tag query: `{rec['tag_query']}`",
            "",
            f"regions: {objs}",
            "",
        ]
        for s in rec["sentences"]:
            h.append(
                f"<li>[{s['score']:.3f}] {_highlight(s['text'], s['noun_phrases'], regions, False)}</li>"
            )
            md.append(
                f"{s['rank'] + 1}. [{s['score']:.3f}] "
                f"{_highlight(s['text'], s['noun_phrases'], regions, True)}"
            )
        h.append("</ol></div>")
        md.append("")
    h.append("</body></html>")
    return "\n".join(h) + "\n", "\n".join(md) + "\n"


def write_report(
    out_dir: str, config, meta: Dict[str, object], shared: Dict[str, object], store=None
) -> Dict[str, object]:
    from mmf_uvlp.corpus.shards import iter_records

    report = aggregate(out_dir, meta, shared, config)
    directory = os.path.join(out_dir, "report")
    os.makedirs(directory, exist_ok=True)
    atomic_write_json(os.path.join(directory, "report.json"), report)
    atomic_write_bytes(os.path.join(directory, "report.md"), _markdown(report).encode("utf-8"))
    _histogram_png(
        os.path.join(directory, "scores_hist.png"), report["retrieval"]["histogram"]["counts"]
    )
    records = list(itertools.islice(iter_records(out_dir), config.report.num_examples))
    page, md = _examples(records)
    atomic_write_bytes(os.path.join(directory, "examples.html"), page.encode("utf-8"))
    atomic_write_bytes(os.path.join(directory, "examples.md"), md.encode("utf-8"))
    return report
