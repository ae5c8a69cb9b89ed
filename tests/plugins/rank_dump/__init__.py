"""An MMF user_dir plugin for tests: a trainer that saves each rank's final parameters."""

import os

import torch
from mmf.common.registry import registry
from mmf.trainers.base_trainer import BaseTrainer
from mmf.utils.configuration import get_mmf_env
from mmf.utils.distributed import get_rank, get_world_size


@registry.register_trainer("rank_dump")
class RankDumpTrainer(BaseTrainer):
    """BaseTrainer writing ``params_rank<r>_of<world>.pt`` into env.save_dir after the last update.

    Written before ``finalize``, which restores the best checkpoint.
    """

    def finalize(self) -> None:
        model = getattr(self.model, "module", self.model)
        state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
        path = os.path.join(get_mmf_env(key="save_dir"), f"params_rank{get_rank()}_of{get_world_size()}.pt")
        torch.save(state, path)
        super().finalize()
