"""Command-line values MMF would store silently wrong are refused with the spelling MMF
expects: ``key=true`` for a boolean or null key, ``key=[a.lmdb]`` (a string, not a list)
and ``key[0]=x`` (dropped).

``mmf_predict`` appends ``evaluation.predict=true`` to every command line (MMF's own
spelling, read by truthiness): that one override is taken as ``evaluation.predict=True``
(:func:`with_predict_flag_as_literal`), so MMF's prediction entry point runs."""

from __future__ import annotations

import functools
from typing import Any, Dict, Optional, Sequence, Tuple


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
    the plugin's trainer (``training.trainer`` of ``config``, or of ``opts``)."""
    from mmf_uvlp.trainers import NAME, chosen_by

    for opt in opts or []:
        key, _, value = str(opt).partition("=")
        if key.strip() == "training.trainer":
            return value.strip() == NAME
    return chosen_by(config)


def install() -> None:
    """MMF 1.0.0rc10's ``Configuration._merge_with_dotlist`` checks a plugin run's values."""
    from mmf.utils.configuration import Configuration
    from mmf_uvlp.utils.user_config import check_command_line_lists, check_command_line_literals

    merge_with_dotlist = Configuration._merge_with_dotlist

    @functools.wraps(merge_with_dotlist)
    def _merge_with_dotlist(self: Configuration, config: Any, opts: Any) -> Any:
        opts = with_predict_flag_as_literal(opts)
        if wanted(config, opts):
            check_command_line_literals(config, opts)
            check_command_line_lists(config, opts)
        return merge_with_dotlist(self, config, opts)

    Configuration._merge_with_dotlist = _merge_with_dotlist


def install_on_mmf_main() -> None:
    """MMF main's ``mmf.utils.configuration._merge_with_dotlist`` checks a plugin run's
    values. Its first pass (``skip_missing``) merges the overrides into MMF's defaults alone,
    before the user config and the model config that tell whether the run is a plugin run,
    and the second pass then finds ``'true'`` already written there: so the first pass
    notes what it would refuse, and the second, over the whole config, refuses it for a
    plugin run."""
    import mmf.utils.configuration as configuration

    from mmf_uvlp.utils.user_config import (
        UserConfigError,
        check_command_line_lists,
        check_command_line_literals,
    )

    merge_with_dotlist = configuration._merge_with_dotlist
    noted: Dict[Tuple[str, ...], UserConfigError] = {}

    @functools.wraps(merge_with_dotlist)
    def _merge_with_dotlist(config, opts, *args, **kwargs):  # type: ignore[no-untyped-def]
        opts = with_predict_flag_as_literal(opts)
        key = tuple(str(opt) for opt in opts or [])
        if kwargs.get("skip_missing", args[0] if args else False):
            noted.pop(key, None)
            try:
                check_command_line_literals(config, opts, existing_only=True)
            except UserConfigError as error:
                noted[key] = error
        elif wanted(config, opts):
            if key in noted:
                raise noted.pop(key)
            check_command_line_literals(config, opts)
            check_command_line_lists(config, opts)
        return merge_with_dotlist(config, opts, *args, **kwargs)

    configuration._merge_with_dotlist = _merge_with_dotlist
