"""The ``val/...`` and ``test/...`` values of an MMF ``train.log``, read strictly.

MMF logs a progress record per log interval and evaluation, as a line of its logger
(``<time> | INFO | mmf.train : <message>``), in the ``simple`` format::

    progress: 1500/1500, test/total_loss: 1.2790, test/vqa2/vqa_accuracy: 0.3878

or the ``json`` one (``{"progress": "1500/1500", "test/vqa2/vqa_accuracy": "0.3878"}``).
Every value is written with four decimals (``f"{value:.4f}"``: ``0.7500``, ``nan``, ``inf``),
so a value cut short (``0.7``: the file truncated, or a killed run's half-written line that
the resumed run's first line continues) does not pass for a number. The last value of each
key counts; a damaged value that a later record of its key replaces is harmless.

:func:`parse_log` raises :class:`LogFormatError` naming the file and line when

- a key's last value is damaged: not MMF's spelling of a number, in a line the file ends
  inside (no end of line), or in a json record that does not parse;
- the log holds two runs: records of different lengths (``progress: n/M`` with another
  ``M``: MMF appends every run in ``env.save_dir`` to one ``train.log``), or one ``test/``
  key logged twice with different values (a run tests once, at its end).

With ``unfinished=True`` (the log of a run that may be running or have been killed), a
damaged last value counts as not logged yet instead, so that the run can be resumed; two
runs in one log are refused either way.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Iterator, Optional

from mmf_uvlp.errors import LogFormatError

_LOG_PREFIX = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \| [A-Z]+ \| \S+ : ")
_MMF_NUMBER = re.compile(r"-?\d+\.\d{4}|-?inf|nan")
_METRIC_KEY = re.compile(r"(?:val|test)/[^\s,:\"]+")
_JSON_KEY = re.compile(r'"((?:val|test)/[^"]+)"\s*:')
_PROGRESS = re.compile(r"(\d+)/(\d+)")


@dataclass(frozen=True)
class _Value:
    """One logged value of a key: ``value`` when well formed, else ``problem``."""

    line: int
    value: Optional[float]
    problem: Optional[str] = None


@dataclass(frozen=True)
class _Record:
    line: int
    progress: Optional[str]
    values: dict[str, _Value]


def _message(line: str) -> str:
    match = _LOG_PREFIX.match(line)
    return line[match.end() :] if match else line


def _number(raw: object, line: int) -> _Value:
    if isinstance(raw, str) and _MMF_NUMBER.fullmatch(raw):
        return _Value(line, float(raw))
    return _Value(line, None, f"value {raw!r} is not a number as MMF writes it (4 decimals)")


def _simple(message: str, line: int) -> _Record:
    progress, values = None, {}
    for item in message.split(", "):
        key, _, raw = item.partition(": ")
        if key == "progress":
            progress = raw
        elif _METRIC_KEY.fullmatch(key):
            values[key] = _number(raw, line)
    return _Record(line, progress, values)


def _json(message: str, line: int) -> _Record:
    try:
        data = json.loads(message)
    except json.JSONDecodeError as e:
        problem = f"the json record does not parse ({e.msg}): cut off or mangled"
        return _Record(
            line, None, {key: _Value(line, None, problem) for key in _JSON_KEY.findall(message)}
        )
    if not isinstance(data, dict):
        return _Record(line, None, {})
    values = {
        key: _number(raw, line)
        for key, raw in data.items()
        if isinstance(key, str) and _METRIC_KEY.fullmatch(key)
    }
    progress = data.get("progress")
    return _Record(line, progress if isinstance(progress, str) else None, values)


def _records(path: str | os.PathLike) -> Iterator[_Record]:
    """The progress records of a log, a line the file ends inside with its values damaged."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for number, line in enumerate(f, start=1):
            message = _message(line).rstrip("\n")
            if message.startswith("progress: "):
                record = _simple(message, number)
            elif message.startswith('{"progress"'):
                record = _json(message, number)
            else:
                continue
            if not line.endswith("\n"):
                problem = "the file ends inside this line (cut off)"
                record = _Record(
                    number,
                    record.progress,
                    {
                        key: _Value(number, None, value.problem or problem)
                        for key, value in record.values.items()
                    },
                )
            yield record


def parse_log(path: str | os.PathLike, unfinished: bool = False) -> dict[str, float]:
    """The last logged value of every ``val/...`` and ``test/...`` key of an MMF log (see
    the module docstring for what is refused, and for ``unfinished``)."""
    last: dict[str, _Value] = {}
    tested: dict[str, _Value] = {}
    schedule: Optional[tuple[int, str]] = None
    for record in _records(path):
        match = _PROGRESS.fullmatch(record.progress or "")
        if match:
            if schedule is None:
                schedule = (record.line, record.progress)
            elif _PROGRESS.fullmatch(schedule[1]).group(2) != match.group(2):
                raise LogFormatError(
                    f"{path}:{record.line}: progress {record.progress}, where line "
                    f"{schedule[0]} has {schedule[1]}: two runs of different lengths in one "
                    "log (MMF appends each run in its env.save_dir to train.log); keep one "
                    "run per log"
                )
        for key, value in record.values.items():
            earlier = tested.get(key)
            if (
                key.startswith("test/")
                and value.value is not None
                and earlier is not None
                and earlier.value != value.value
            ):
                raise LogFormatError(
                    f"{path}:{value.line}: {key} is {value.value:.4f}, where line "
                    f"{earlier.line} has {earlier.value:.4f}: two runs in one log (a run "
                    "tests once, at its end; MMF appends each run in its env.save_dir to "
                    "train.log); keep one run per log"
                )
            if key.startswith("test/") and value.value is not None:
                tested[key] = value
            last[key] = value
    damaged = sorted(
        (value.line, key, value.problem) for key, value in last.items() if value.value is None
    )
    if damaged and not unfinished:
        line = damaged[0][0]
        what = "; ".join(f"{key}: {problem}" for at, key, problem in damaged if at == line)
        raise LogFormatError(
            f"{path}:{line}: {what}; no later record replaces the damaged value (a truncated "
            "file, or a killed run's line continued by the next run): rerun the run, or "
            "delete the damaged line"
        )
    return {key: value.value for key, value in last.items() if value.value is not None}
