"""Command-line values MMF would store silently wrong are refused with the spelling MMF
expects: ``key=true`` for a boolean or null key, ``key=[a.lmdb]`` (a string, not a list)
and ``key[0]=x`` (dropped).

``mmf_predict`` appends ``evaluation.predict=true`` to every command line (MMF's own
spelling, read by truthiness): that one override is taken as ``evaluation.predict=True``
(:func:`with_predict_flag_as_literal`), so MMF's prediction entry point runs."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from mmf_uvlp.errors import UserConfigError


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


class DotlistCheck:
    """The command line's values, checked before MMF's ``_merge_with_dotlist`` merges them
    into ``config``: ``mmf_predict``'s flag taken as a literal, and in a run of the plugin's
    trainer (:func:`wanted`) the trainer's keys declared and the values checked
    (``key=true``, ``key=[a.lmdb]``, ``key[0]=x`` refused with MMF's spelling).

    MMF main merges twice: its first pass (``skip_missing``) merges the overrides into MMF's
    defaults alone, before the user config and the model config that tell the run's
    trainer, and the second pass then finds ``'true'`` already written there; so the first
    pass notes what it would refuse, and the second, over the whole config, refuses it.
    rc10 merges once (no ``skip_missing``)."""

    def __init__(self) -> None:
        self._noted: Dict[Tuple[str, ...], UserConfigError] = {}

    def __call__(self, config: Any, opts: Any, skip_missing: bool = False) -> Any:
        """``opts`` as MMF should merge them into ``config``; raises the
        :class:`UserConfigError` of a value MMF would store silently wrong."""
        from mmf_uvlp.trainers.choice import declare_switches
        from mmf_uvlp.utils.user_config import (
            check_command_line_lists,
            check_command_line_literals,
        )

        opts = with_predict_flag_as_literal(opts)
        key = tuple(str(opt) for opt in opts or [])
        if skip_missing:
            self._noted.pop(key, None)
            try:
                check_command_line_literals(config, opts, existing_only=True)
            except UserConfigError as error:
                self._noted[key] = error
        elif wanted(config, opts):
            declare_switches(config)
            if key in self._noted:
                raise self._noted.pop(key)
            check_command_line_literals(config, opts)
            check_command_line_lists(config, opts)
        return opts
