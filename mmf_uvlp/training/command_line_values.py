"""Command-line values MMF would store silently wrong are refused with the spelling MMF
expects: ``key=true`` for a boolean or null key, ``key=[a.lmdb]`` (a string, not a list)
and ``key[0]=x`` (dropped).

``mmf_predict`` appends ``evaluation.predict=true`` to every command line (MMF's own
spelling, read by truthiness): that one override is taken as ``evaluation.predict=True``
(:func:`with_predict_flag_as_literal`), so MMF's prediction entry point runs."""

from __future__ import annotations

from typing import Any, Optional, Sequence


# What MMF's ``mmf_cli.predict`` appends to the command line, and its Python literal.
MMF_PREDICT_FLAG = "evaluation.predict=true"
PREDICT_FLAG_LITERAL = "evaluation.predict=True"


def with_predict_flag_as_literal(opts: Any) -> Any:
    """``opts`` with the ``evaluation.predict=true`` that ``mmf_predict`` appends written as
    ``evaluation.predict=True`` (in place, so that MMF's later passes see the same)."""
    if isinstance(opts, list):
        for at, opt in enumerate(opts):
            if opt == MMF_PREDICT_FLAG:
                opts[at] = PREDICT_FLAG_LITERAL
    return opts


def wanted(config: Any, opts: Optional[Sequence[str]]) -> bool:
    """Whether the run being configured (``config`` before ``opts`` are merged) trains with
    the plugin's trainer or a subclass of it (``training.trainer`` of ``config``, or of
    ``opts``)."""
    from mmf_uvlp.trainers.choice import chosen_by, is_plugin_trainer

    for opt in opts or []:
        key, _, value = str(opt).partition("=")
        if key.strip() == "training.trainer":
            return is_plugin_trainer(value.strip())
    return chosen_by(config)
