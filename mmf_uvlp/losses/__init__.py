"""μ-VLA pre-training losses, one registered MMF loss per module (``uvla_*``)."""
