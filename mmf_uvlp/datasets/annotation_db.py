"""MMFDataset's annotation-database hook, under the name of each MMF version.

``MMFDataset.__init__`` builds ``self.annotation_db`` by calling ``build_annotation_db()``
on MMF main (1.0.0rc12) and ``_build_annotation_db()`` on rc10. A dataset deriving from
:class:`AnnotationDbHook` (before ``MMFDataset``) overrides ``build_annotation_db``, MMF
main's public name, and both versions reach it.

The annotation database is built before MMF's features database; :meth:`feature_names`
gives it the dataset's feature locations, so that an image missing from the features is
an error naming the annotation file and line when the dataset is built, not a
``KeyError`` once training reaches it.
"""

from __future__ import annotations

from typing import Any, Optional

from mmf_uvlp.data_formats.mmf_features import FeatureNames


class AnnotationDbHook:
    """Mixin: rc10's ``_build_annotation_db`` calls the dataset's ``build_annotation_db``."""

    def build_annotation_db(self) -> Any:
        """The dataset's annotation database (a sized, indexable collection of items)."""
        raise NotImplementedError(f"{type(self).__name__} must override build_annotation_db()")

    def _build_annotation_db(self) -> Any:
        return self.build_annotation_db()

    def feature_names(self) -> Optional[FeatureNames]:
        """The images of the dataset's ``features`` (as MMF's FeaturesDatabase will read
        them), or None when it uses no features."""
        from mmf.utils.general import get_absolute_path

        if not self.config.get("use_features", False):
            return None
        paths = self._get_path_based_on_index(self.config, "features", self._index)
        return FeatureNames([get_absolute_path(path) for path in paths.split(",")])
