"""Input embeddings of the single-stream μ-VLA transformer.

- text token: BERT's ``LayerNorm(word + position + token_type)``;
- tag token (detector tag word-pieces, U-VisualBERT / R-T): the position embedding is
  replaced by the box embedding of its region: ``LayerNorm(word + box + token_type)``;
- visual token: ``LayerNorm(LayerNorm(W_f f) + LayerNorm(W_b b) + token_type[visual])``
  (UNITER's layout), ``b`` the 5-d box ``[x1/W, y1/H, x2/W, y2/H, area/(W*H)]``.

The box embedding ``LayerNorm(W_b b)`` is one module shared by regions and tags.
"""

from __future__ import annotations

from typing import List, Optional

import torch
from torch import nn
from transformers.models.bert.modeling_bert import BertEmbeddings

BOX_DIM = 5


class UVLAEmbeddings(nn.Module):
    """Text, tag and visual token embeddings over a BERT's embedding tables."""

    def __init__(
        self,
        text: BertEmbeddings,
        feature_dim: int,
        visual_token_type: int,
        layer_norm_eps: float,
        dropout: float,
    ):
        super().__init__()
        hidden = text.word_embeddings.embedding_dim
        type_vocab = text.token_type_embeddings.num_embeddings
        if not 0 <= visual_token_type < type_vocab:
            raise ValueError(
                f"visual_token_type must index the BERT token-type table (size {type_vocab}), "
                f"got {visual_token_type}"
            )
        self.text = text
        self.visual_token_type = visual_token_type
        self.feature_projection = nn.Linear(feature_dim, hidden)
        self.feature_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.box_projection = nn.Linear(BOX_DIM, hidden)
        self.box_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.visual_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def new_modules(self) -> List[nn.Module]:
        """Modules a BERT checkpoint does not have (for BERT's weight initialisation)."""
        return [
            self.feature_projection,
            self.feature_norm,
            self.box_projection,
            self.box_norm,
            self.visual_norm,
        ]

    def box(self, boxes: torch.Tensor) -> torch.Tensor:
        """``LayerNorm(W_b b)``: (..., 5) -> (..., H)."""
        return self.box_norm(self.box_projection(boxes))

    def embed_text(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        text_boxes: Optional[torch.Tensor] = None,
        text_is_tag: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Text and tag tokens: ids (B, L), segments (B, L), boxes (B, L, 5), is_tag (B, L)."""
        length = input_ids.size(1)
        positions = torch.arange(length, device=input_ids.device)
        location = self.text.position_embeddings(positions).unsqueeze(0)  # (1, L, H)
        if text_is_tag is not None and text_boxes is not None:
            is_tag = text_is_tag.bool().unsqueeze(-1)  # (B, L, 1)
            location = torch.where(is_tag, self.box(text_boxes.float()), location)  # (B, L, H)
        embedded = (
            self.text.word_embeddings(input_ids)
            + location
            + self.text.token_type_embeddings(segment_ids)
        )  # (B, L, H)
        return self.text.dropout(self.text.LayerNorm(embedded))

    def embed_regions(self, features: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """Visual tokens: features (B, R, D), boxes (B, R, 5) -> (B, R, H)."""
        token_type = torch.full(
            features.shape[:2], self.visual_token_type, dtype=torch.long, device=features.device
        )
        embedded = (
            self.feature_norm(self.feature_projection(features))
            + self.box(boxes)
            + self.text.token_type_embeddings(token_type)
        )  # (B, R, H)
        return self.dropout(self.visual_norm(embedded))
