"""``random_pairs``: images paired with random sentences, a ``true_pair_ratio`` share with their own caption."""
