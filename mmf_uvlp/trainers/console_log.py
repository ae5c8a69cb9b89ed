"""Short progress lines on the console; MMF's full lines stay in the files it writes.

MMF logs one line per log interval and per evaluation with every meter value and timer
(``progress: 2150/5000, train/total_loss: 2.8632, train/total_loss/avg: 8.5888, ...``:
40 fields, 1,600 characters in a pre-training). The plugin's trainer keeps that line in
``train.log`` and ``logs/train_<time>.log`` (TensorBoard has the scalars with
``training.tensorboard``) and shows a person a short one on the console::

    update 2150/5000 · epoch 1 · loss 2.863 (avg 8.589) · lr 1.9e-4 · 0.83 updates/s · eta 57m35s
    val · update 1500/1500 · vqa2/vqa_accuracy 0.5018 · best 0.5018 (update 1500)
    test · update 300/300 · refcoco_plus_{val,testA,testB}/refcoco_accuracy 0.8537, 0.9323, 0.8065

:func:`install` wraps the formatter of MMF's console handlers (the stream handlers beside
MMF's ``train.log`` handler, set up by rc10's ``Logger`` or MMF main's ``setup_logger``): only
a record holding a progress line is shortened, and only there. ``training.console_log: full``
keeps MMF's lines on the console too.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

from mmf_uvlp.errors import UserConfigError

SHORT, FULL = "short", "full"
SPLITS = ("train", "val", "test")
MAX_CHARS = 100  # of a short line, before the handler's time stamp and logger name
_SEPARATOR = " · "
_FIELD = re.compile(r"([^:]+): (.*)", re.DOTALL)
_DURATION = re.compile(r"(\d+)(ms|h|m|s)\b")


def parse_progress(message: str) -> Optional[Dict[str, str]]:
    """The fields of MMF's progress line (``training.log_format`` simple or json), or None
    when ``message`` is no such line."""
    if message.startswith("{"):
        try:
            loaded = json.loads(message)
        except ValueError:
            return None
        if not isinstance(loaded, dict):
            return None
        fields = {str(key): str(value) for key, value in loaded.items()}
    else:
        fields = {}
        for part in re.split(r", (?=[^,:]+: )", message):
            match = _FIELD.fullmatch(part)
            if match is None:
                return None
            fields[match.group(1)] = match.group(2)
    splits = [key.split("/", 1)[0] for key in fields if "/" in key]
    if not any(split in SPLITS for split in splits):
        return None
    # MMF's meter always logs the total loss; the progress when the trainer counts updates
    if "progress" not in fields and not any(f"{split}/total_loss" in fields for split in SPLITS):
        return None
    return fields


def _number(value: str) -> str:
    try:
        return f"{float(value):.4g}"
    except ValueError:
        return value


def _lr(value: str) -> str:
    try:
        rate = float(value)
    except ValueError:
        return value
    return "0" if rate == 0 else re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{rate:.1e}")


def _duration(value: str) -> str:
    """MMF's ``01h 20m 05s 021ms`` as ``1h20m`` (``39m36s``, ``12s``)."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = _DURATION.findall(value)
    if not parts:
        return value
    seconds = int(sum(int(amount) * units[unit] for amount, unit in parts))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _train_parts(fields: Dict[str, str]) -> Iterator[str]:
    if "progress" in fields:
        yield f"update {fields['progress']}"
    if "epoch" in fields:
        yield f"epoch {fields['epoch']}"
    if "train/total_loss" in fields:
        average = fields.get("train/total_loss/avg")
        yield f"loss {_number(fields['train/total_loss'])}" + (
            f" (avg {_number(average)})" if average is not None else ""
        )
    if "lr" in fields:
        yield f"lr {_lr(fields['lr'])}"
    if "ups" in fields:
        yield f"{fields['ups']} updates/s"
    if "max mem" in fields:
        yield f"mem {_number(fields['max mem'])} MiB"
    if "eta" in fields:
        yield f"eta {_duration(fields['eta'])}"


def _group(metric: str, values: Dict[str, str]) -> str:
    """One metric over several datasets: ``refcoco_plus_{val,testA}/refcoco_accuracy 0.85,
    0.93`` when their names share a prefix ending in ``_``, else ``metric a 0.85, b 0.93``."""
    prefix = os.path.commonprefix(list(values))
    prefix = prefix[: prefix.rfind("_") + 1]
    if prefix:
        rests = ",".join(dataset[len(prefix) :] for dataset in values)
        return f"{prefix}{{{rests}}}/{metric} " + ", ".join(values.values())
    return f"{metric} " + ", ".join(f"{dataset} {value}" for dataset, value in values.items())


def _evaluation_parts(split: str, fields: Dict[str, str], metrics: Sequence[str]) -> Iterator[str]:
    yield split
    if "progress" in fields:
        yield f"update {fields['progress']}"
    by_metric: Dict[str, Dict[str, str]] = {}
    for key, value in fields.items():
        dataset, _, metric = key[len(split) + 1 :].rpartition("/")
        if key.startswith(f"{split}/") and dataset and metric in metrics:
            by_metric.setdefault(metric, {})[dataset] = _number(value)
    if not by_metric and f"{split}/total_loss" in fields:
        yield f"loss {_number(fields[f'{split}/total_loss'])}"
    shown = set()
    for metric, values in by_metric.items():
        if len(values) == 1:
            [(dataset, value)] = values.items()
            shown.add(f"{dataset}/{metric}")
            yield f"{dataset}/{metric} {value}"
        else:
            yield _group(metric, values)
    for key, value in fields.items():
        if key.startswith("best_") and key not in ("best_update", "best_iteration"):
            name = key[len("best_") :].split("/", 1)[-1]
            at = f" (update {fields['best_update']})" if "best_update" in fields else ""
            yield f"best {'' if name in shown else name + ' '}{_number(value)}{at}"


def short_line(message: str, metrics: Sequence[str] = ()) -> Optional[str]:
    """The console's line for MMF's progress line ``message``, or None when it is none.

    ``metrics``: the names of the run's evaluation metrics (``evaluation.metrics``); an
    evaluation line shows them (its total loss where it has none) and early stopping's best,
    not the losses of each dataset (the full line has those).
    """
    fields = parse_progress(message)
    if fields is None:
        return None
    split = next(key.split("/", 1)[0] for key in fields if key.split("/", 1)[0] in SPLITS)
    parts = _train_parts(fields) if split == "train" else _evaluation_parts(split, fields, metrics)
    line = _SEPARATOR.join(parts)
    if len(line) > MAX_CHARS:
        line = line[: MAX_CHARS - 2].rsplit(" ", 1)[0] + " …"
    return line


def metric_names(config: Any) -> List[str]:
    """The names under which MMF reports ``evaluation.metrics`` (a metric's ``key``, else
    its ``type``, or the name itself)."""
    names = []
    for metric in OmegaConf.select(config, "evaluation.metrics", default=None) or []:
        if isinstance(metric, str):
            names.append(metric)
        else:
            names.append(str(metric.get("key", metric.get("type"))))
    return names


class ShortProgressFormatter(logging.Formatter):
    """MMF's console formatter (``inner``), with progress lines shortened."""

    def __init__(self, inner: Optional[logging.Formatter], metrics: Sequence[str]):
        super().__init__()
        self.inner = inner or logging.Formatter()
        self.metrics = tuple(metrics)

    def format(self, record: logging.LogRecord) -> str:
        short = short_line(record.getMessage(), self.metrics)
        if short is None:
            return self.inner.format(record)
        shortened = logging.makeLogRecord(record.__dict__)  # the files format the original
        shortened.msg, shortened.args = short, None
        return self.inner.format(shortened)


def _loggers() -> Iterator[logging.Logger]:
    yield logging.getLogger()
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            yield logger


def _file(handler: logging.Handler) -> Optional[str]:
    """The file ``handler`` writes, or None (a console, or no stream)."""
    if isinstance(handler, logging.FileHandler):
        return handler.baseFilename
    name = getattr(getattr(handler, "stream", None), "name", None)
    return name if isinstance(name, str) and os.path.isfile(name) else None


def mmf_console_handlers() -> Tuple[List[logging.StreamHandler], Optional[str]]:
    """MMF's console handlers: the stream handlers that write no file, of the loggers that
    also write a ``train.log`` (rc10's ``mmf.train``, MMF main's ``mmf`` and root); and
    that ``train.log`` (None when no logger writes one)."""
    found: Dict[int, logging.StreamHandler] = {}
    full_log = None
    for logger in _loggers():
        files = [_file(handler) for handler in logger.handlers]
        logs = [name for name in files if name and os.path.basename(name) == "train.log"]
        if not logs:
            continue
        full_log = full_log or logs[0]
        for handler, name in zip(logger.handlers, files):
            if isinstance(handler, logging.StreamHandler) and name is None:
                found[id(handler)] = handler
    return list(found.values()), full_log


def install(config: Any) -> None:
    """Shorten the progress lines on MMF's console handlers, or keep MMF's full lines there
    (``training.console_log: full``); says once on the console where the full lines are."""
    mode = OmegaConf.select(config, "training.console_log", default=SHORT)
    if mode not in (SHORT, FULL):
        raise UserConfigError(f"training.console_log must be '{SHORT}' or '{FULL}', got {mode!r}")
    handlers, full_log = mmf_console_handlers()
    for handler in handlers:
        inner = handler.formatter
        if isinstance(inner, ShortProgressFormatter):
            inner = inner.inner
        handler.setFormatter(
            ShortProgressFormatter(inner, metric_names(config)) if mode == SHORT else inner
        )
    if mode == SHORT and handlers and full_log and handlers[0].level <= logging.INFO:
        note = logging.makeLogRecord(
            {
                "name": __name__,
                "levelno": logging.INFO,
                "levelname": "INFO",
                "msg": f"console: short progress lines; all values in {full_log} "
                "(training.console_log=full: here too)",
            }
        )
        handlers[0].handle(note)
