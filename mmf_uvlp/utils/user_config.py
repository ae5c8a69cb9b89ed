"""Mistakes in what a user wrote (config files, command-line overrides), reported in one line.

``mmf_run`` prints a :class:`UserConfigError` as ``mmf_run: error: <message>`` and exits
with status 2 (see ``mmf_uvlp/compat``), instead of a stack trace.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple

from omegaconf import OmegaConf

# Spellings that YAML reads as booleans/null but Python's literal_eval (MMF's command
# line) keeps as strings; the value is the spelling MMF expects.
_YAML_SPELLINGS = {"true": "True", "false": "False", "null": "None", "none": "None",
                   "yes": "True", "no": "False", "on": "True", "off": "False", "~": "None"}


class UserConfigError(ValueError):
    """A config key or command-line value that cannot work; the message says how to fix it."""


def _key_values(opts: Iterable[str]) -> List[Tuple[str, str]]:
    opts = list(opts)
    if opts and "=" in opts[0]:
        return [tuple(opt.split("=", 1)) for opt in opts]  # type: ignore[misc]
    return list(zip(opts[0::2], opts[1::2]))


def check_command_line_literals(config: Any, opts: Optional[Iterable[str]]) -> None:
    """Refuse ``key=true``-style overrides of boolean / null keys.

    MMF decodes command-line values with ``ast.literal_eval``: ``true`` stays the string
    ``'true'``, which every ``if config.x is True`` then silently ignores. A key whose
    current value is a boolean or null (or that does not exist yet) must be given as
    ``True`` / ``False`` / ``None``; string-valued keys may take any text.
    """
    for key, value in _key_values(opts or []):
        spelling = _YAML_SPELLINGS.get(value.strip().lower())
        if spelling is None or value.strip() == spelling:
            continue
        current = OmegaConf.select(config, key, default=None, throw_on_missing=False)
        if current is None or isinstance(current, bool):
            raise UserConfigError(
                f"command line: {key}={value} would be stored as the string {value!r} (MMF reads "
                f"command-line values as Python literals); write {key}={spelling}"
            )
