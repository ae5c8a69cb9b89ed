"""A run that cannot go on for a reason its user can act on, reported in one line.

``mmf_run`` prints a :class:`RunStopped` as ``mmf_run: error: <message>`` and exits with
status 1 (a mistake in the config, :class:`~mmf_uvlp.utils.user_config.UserConfigError`,
exits with 2); see ``one_line_user_errors`` in ``mmf_uvlp/compat``. The message names
what stopped the run (the file, the update, the samples) and what was expected.
"""

from __future__ import annotations


class RunStopped(RuntimeError):
    """Training stopped: bad data, a full disk, a checkpoint that cannot be used."""
