"""Annotation databases of the plugin's datasets."""
