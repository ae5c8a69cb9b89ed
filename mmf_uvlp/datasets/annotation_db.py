"""MMFDataset's annotation-database hook, under the name of each MMF version.

``MMFDataset.__init__`` builds ``self.annotation_db`` by calling ``build_annotation_db()``
on MMF main (1.0.0rc12) and ``_build_annotation_db()`` on rc10. A dataset deriving from
:class:`AnnotationDbHook` (before ``MMFDataset``) overrides ``build_annotation_db``, MMF
main's public name, and both versions reach it.
"""

from __future__ import annotations

from typing import Any


class AnnotationDbHook:
    """Mixin: rc10's ``_build_annotation_db`` calls the dataset's ``build_annotation_db``."""

    def build_annotation_db(self) -> Any:
        """The dataset's annotation database (a sized, indexable collection of items)."""
        raise NotImplementedError(f"{type(self).__name__} must override build_annotation_db()")

    def _build_annotation_db(self) -> Any:
        return self.build_annotation_db()
