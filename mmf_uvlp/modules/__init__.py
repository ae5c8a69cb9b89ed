"""Building blocks of the μ-VLA model: embeddings, boxes and heads."""
