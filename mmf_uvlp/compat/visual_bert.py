"""MMF 1.0.0rc10's VisualBERT on transformers 4.x with ``output_attentions: true``: eager
attention, the maps asked of the encoder, and the sequence output as documented."""

from __future__ import annotations

import functools
from typing import Any


def output_attentions() -> None:
    """VisualBERT's attention maps on transformers 4.x (``output_attentions: true``)."""
    import torch
    from mmf.models.visual_bert import VisualBERTBase

    init, forward = VisualBERTBase.__init__, VisualBERTBase.forward

    @functools.wraps(init)
    def patched_init(
        self: Any, config: Any, *args: Any, output_attentions: bool = False, **kwargs: Any
    ) -> None:
        if output_attentions:
            config._attn_implementation = "eager"
        init(self, config, *args, output_attentions=output_attentions, **kwargs)
        if output_attentions:
            self.encoder.forward = functools.partial(self.encoder.forward, output_attentions=True)

    @functools.wraps(forward)
    def patched_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = forward(self, *args, **kwargs)
        if self.output_attentions and len(outputs) == 3 and not torch.is_tensor(outputs[0]):
            return (outputs[0][0],) + tuple(outputs[1:])  # the sequence output, as documented
        return outputs

    VisualBERTBase.__init__ = patched_init
    VisualBERTBase.forward = patched_forward
