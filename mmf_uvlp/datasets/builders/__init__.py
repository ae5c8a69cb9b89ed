"""Dataset builders, one folder per registered dataset (MMF's layout)."""
