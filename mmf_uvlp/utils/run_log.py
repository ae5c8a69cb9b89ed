"""Lines for the run's own log (``train.log``) from the plugin's modules."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def write_run_log(message: str) -> None:
    """``message`` in the run's log (rc10 registers its Logger as the writer, MMF main a
    logging.Logger); outside a run, in this module's logger."""
    from mmf.common.registry import registry  # MMF's import loads the plugin, this module

    writer = registry.get("writer", no_warning=True)
    if writer is None:
        logger.info(message)
        return
    log = writer.write if hasattr(writer, "write") else writer.info
    log(message)
