"""Readers of the on-disk formats the project consumes (VinVL, MMF features, refer, ...).

Every reader streams and raises :class:`FormatError` (a ``ValueError``) naming the
file, the line or key, the field and what was expected.
"""

from mmf_uvlp.errors import FormatError

__all__ = ["FormatError"]
