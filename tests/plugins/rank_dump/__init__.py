"""An MMF user_dir plugin for tests: a trainer that saves each rank's first and final parameters."""

import os

import torch
from mmf.common.registry import registry
from mmf.utils.configuration import get_mmf_env
from mmf.utils.distributed import get_rank, get_world_size
from mmf_uvlp.trainers.uvlp_trainer import UVLPTrainer


@registry.register_trainer("rank_dump")
class RankDumpTrainer(UVLPTrainer):
    """The plugin's trainer writing ``params_<when>_rank<r>_of<world>.pt`` into env.save_dir.

    ``init``: before the first update; ``final``: after the last update, before
    ``finalize`` restores the best checkpoint.
    """

    def _dump(self, when: str) -> None:
        model = getattr(self.model, "module", self.model)
        state = {name: tensor.detach().cpu().clone() for name, tensor in model.state_dict().items()}
        name = f"params_{when}_rank{get_rank()}_of{get_world_size()}.pt"
        torch.save(state, os.path.join(get_mmf_env(key="save_dir"), name))

    def train(self) -> None:
        self._dump("init")
        super().train()

    def finalize(self) -> None:
        self._dump("final")
        super().finalize()
