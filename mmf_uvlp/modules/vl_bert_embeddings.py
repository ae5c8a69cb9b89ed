"""Input embeddings of VL-BERT (Su et al., ICLR 2020, section 3.2).

Sequence ``[CLS] text [SEP] region_1 ... region_R [END]``; every element's embedding is

    LayerNorm(token + visual feature + segment + sequence position)

- token: the WordPiece embedding for text, a learned ``[IMG]`` for each region, a
  learned ``[END]`` for the end element;
- visual feature: ``FC([appearance; geometry])`` with the 4-d box ``[x1/W, y1/H, x2/W,
  y2/H]`` embedded by sines and cosines of several wavelengths (Relation Networks). A
  region uses its own features and box; every non-visual element (text, ``[END]``) uses
  the **whole image**: the mean of the features of the image's real regions that are not
  masked, with the whole-image box. The paper runs Fast R-CNN on a whole-image RoI after
  zeroing the masked RoIs' pixels; with precomputed features, leaving the masked regions
  out of the mean is what keeps their features from reaching any element. A masked
  region's own features are zeroed. Samples without regions (text-only corpus) use one
  learned vector instead (the paper's "learnable embedding shared for all words");
- segment: A / B for the text's sentences (BERT's two token types), C for the image;
- sequence position: BERT's positions for text; all regions share the position after
  the text (regions have no order), ``[END]`` the next one.

The visual feature embeddings pass a LayerNorm each (text / regions); the text one starts
with gain 0, as in the reference implementation, so the pretrained BERT's text embedding
is undisturbed at initialisation.
"""

from __future__ import annotations

from typing import List

import torch
from torch import nn
from transformers.models.bert.modeling_bert import BertEmbeddings

IMAGE_SEGMENT = 2  # segment C
IMG, END = 0, 1  # rows of the special-token table
WHOLE_IMAGE_BOX = (0.0, 0.0, 1.0, 1.0)


def sinusoidal_geometry(
    boxes: torch.Tensor, dim: int, wavelength: float = 1000.0, scale: float = 100.0
) -> torch.Tensor:
    """Boxes (..., 4) in [0, 1] -> (..., dim): per coordinate, sin and cos of
    ``scale * c / wavelength^(8k/dim)`` for k < dim / 8."""
    if dim % 8:
        raise ValueError(f"the geometry embedding size must be a multiple of 8, got {dim}")
    steps = torch.arange(dim // 8, dtype=torch.float32, device=boxes.device)
    frequencies = wavelength ** (8.0 * steps / dim)  # (dim/8,)
    angles = scale * boxes.float().unsqueeze(-1) / frequencies  # (..., 4, dim/8)
    embedded = torch.cat([angles.sin(), angles.cos()], dim=-1)  # (..., 4, dim/4)
    return embedded.flatten(-2)  # (..., dim)


def with_image_segment(token_types: nn.Embedding, std: float) -> nn.Embedding:
    """BERT's token-type table (A, B) extended by a row for segment C, drawn N(0, std)."""
    if token_types.num_embeddings != IMAGE_SEGMENT:
        raise ValueError(
            f"VL-BERT extends a BERT with 2 token types (A, B), got {token_types.num_embeddings}"
        )
    segments = nn.Embedding(IMAGE_SEGMENT + 1, token_types.embedding_dim)
    with torch.no_grad():
        segments.weight.normal_(0.0, std)
        segments.weight[:IMAGE_SEGMENT] = token_types.weight
    return segments


class VLBERTEmbeddings(nn.Module):
    """VL-BERT's element embeddings over a BERT's embedding tables (see the module doc)."""

    def __init__(
        self,
        text: BertEmbeddings,
        feature_dim: int,
        geometry_dim: int,
        initializer_range: float,
        layer_norm_eps: float,
    ):
        super().__init__()
        hidden = text.word_embeddings.embedding_dim
        self.text = text  # word and position tables, LayerNorm, dropout
        self.text.token_type_embeddings = with_image_segment(
            text.token_type_embeddings, initializer_range
        )
        self.geometry_dim = geometry_dim
        self.special = nn.Embedding(2, hidden)  # [IMG], [END]
        self.visual_projection = nn.Linear(feature_dim + geometry_dim, hidden)
        self.text_visual_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.region_visual_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.text_only_visual = nn.Parameter(torch.zeros(hidden))

    def new_modules(self) -> List[nn.Module]:
        """Modules a BERT checkpoint does not have (for BERT's weight initialisation)."""
        return [
            self.special,
            self.visual_projection,
            self.text_visual_norm,
            self.region_visual_norm,
        ]

    def start_text_visual_at_zero(self) -> None:
        """Gain 0 on the text elements' visual feature embedding (after initialisation)."""
        with torch.no_grad():
            self.text_visual_norm.weight.zero_()

    def visual(self, features: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """``FC([appearance; geometry])``: features (..., D), boxes (..., 4) -> (..., H)."""
        geometry = sinusoidal_geometry(boxes, self.geometry_dim)
        return self.visual_projection(torch.cat([features, geometry], dim=-1))

    def forward(
        self,
        input_ids: torch.Tensor,
        input_mask: torch.Tensor,
        segment_ids: torch.Tensor,
        features: torch.Tensor,
        boxes: torch.Tensor,
        region_mask: torch.Tensor,
        region_masked: torch.Tensor,
    ) -> torch.Tensor:
        """Elements [text (L); regions (R); END] -> (B, L+R+1, H).

        input_ids, input_mask, segment_ids (B, L); features (B, R, D); boxes (B, R, 5)
        ``[x1/W, y1/H, x2/W, y2/H, area]``; region_mask (B, R) 1 = real region;
        region_masked (B, R) 1 = masked (its features reach no element).
        """
        batch, length = input_ids.shape
        regions = features.size(1)
        device = input_ids.device
        masked = region_masked.bool().unsqueeze(-1)  # (B, R, 1)
        features = features.masked_fill(masked, 0.0)
        if regions:
            visible = region_mask.bool().unsqueeze(-1) & ~masked  # (B, R, 1)
            count = visible.sum(1).clamp(min=1)  # (B, 1)
            whole = (features * visible).sum(1) / count  # (B, D)
            whole_box = features.new_tensor(WHOLE_IMAGE_BOX).expand(batch, 4)
            context = self.text_visual_norm(self.visual(whole, whole_box))  # (B, H)
        else:
            context = self.text_only_visual.expand(batch, -1)  # (B, H)
        context = context.unsqueeze(1)  # (B, 1, H)

        word_positions = torch.arange(length, device=device).unsqueeze(0)  # (1, L)
        text = (
            self.text.word_embeddings(input_ids)
            + context
            + self.text.token_type_embeddings(segment_ids)
            + self.text.position_embeddings(word_positions)
        )  # (B, L, H)

        after_text = input_mask.long().sum(1, keepdim=True)  # (B, 1): regions' position
        image_segment = self.text.token_type_embeddings.weight[IMAGE_SEGMENT]  # (H,)
        region_elements = (
            self.special.weight[IMG]
            + self.region_visual_norm(self.visual(features, boxes[..., :4]))
            + image_segment
            + self.text.position_embeddings(after_text)
        )  # (B, R, H)
        end = (
            self.special.weight[END]
            + context
            + image_segment
            + self.text.position_embeddings(after_text + 1)
        )  # (B, 1, H)
        elements = torch.cat([text, region_elements, end], dim=1)  # (B, L+R+1, H)
        return self.text.dropout(self.text.LayerNorm(elements))
