"""Images whose features hold another number of regions than their corpus record lists.

Region ``i`` of a corpus record is row ``i`` of its image's features, so both come from one
detector output. When they disagree, a sample uses the regions both have; each direction
(fewer feature rows than listed regions, more) is counted per dataset and reported as a
warning naming the image, at the 1st, 10th, 100th, ... disagreement of this process (a
DataLoader worker counts its own).
"""

from __future__ import annotations

import logging
from typing import Dict

logger = logging.getLogger(__name__)


class RegionCounts:
    """The disagreements of one dataset, by direction."""

    def __init__(self, dataset_name: str) -> None:
        self.dataset_name = dataset_name
        self.counts: Dict[str, int] = {"fewer": 0, "more": 0}

    def check(self, image_id: str, feature_path: str, listed: int, rows: int) -> None:
        """Count (and at 1, 10, 100, ... report) ``rows`` feature rows against the ``listed``
        regions of image ``image_id``."""
        if rows == listed:
            return
        direction = "fewer" if rows < listed else "more"
        self.counts[direction] += 1
        count = self.counts[direction]
        if str(count).strip("0") == "1":  # 1, 10, 100, ...
            logger.warning(
                "%s: %d image(s) so far whose features hold %s regions than the corpus lists "
                "(latest: image %s, %d regions in the corpus, %d feature rows in %s); their "
                "samples use the %d regions both have: the corpus and the features come from "
                "different detector outputs",
                self.dataset_name,
                count,
                direction,
                image_id,
                listed,
                rows,
                feature_path,
                min(listed, rows),
            )
