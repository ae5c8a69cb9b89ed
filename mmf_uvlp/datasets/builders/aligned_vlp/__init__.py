"""``aligned_vlp``: supervised pre-training on the true image-caption pairs (the upper bound)."""
