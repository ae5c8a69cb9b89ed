"""``masked_aligned_vlp``: MMF's own masked-caption pre-training data over the aligned pairs."""
