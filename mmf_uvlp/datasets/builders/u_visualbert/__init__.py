"""U-VisualBERT's uni-modal pre-training data: ``u_visualbert_text`` and ``u_visualbert_image``."""
