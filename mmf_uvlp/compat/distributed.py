"""MMF 1.0.0rc10's distributed training on a CPU-only torch (gloo) and under ``torchrun``
(each rank on the GPU of its ``LOCAL_RANK``)."""

from __future__ import annotations

import functools
import os
from typing import Any

from mmf_uvlp.training.cpu_distributed import DistributedWithoutNCCL, cpu_only, cuda_calls_to


def gloo_on_cpu() -> None:
    """rc10's world size, process group, device and DDP wrapping work without CUDA."""
    import torch

    import mmf.utils.distributed as distributed
    from mmf.common.registry import registry
    from mmf.trainers.base_trainer import BaseTrainer

    distributed.dist = DistributedWithoutNCCL("torch.distributed")
    distributed_init = distributed.distributed_init

    @functools.wraps(distributed_init)
    def distributed_init_any_backend(config: Any) -> Any:
        if cpu_only():
            config.distributed.backend = "gloo"
            with cuda_calls_to("cpu"):
                return distributed_init(config)
        return distributed_init(config)

    distributed.distributed_init = distributed_init_any_backend

    set_device = BaseTrainer._set_device
    parallelize_model = BaseTrainer.parallelize_model

    def _set_device(self: BaseTrainer) -> None:
        set_device(self)
        if self.distributed and cpu_only():
            self.device = torch.device("cpu")
            registry.register("current_device", self.device)

    def _parallelize_model(self: BaseTrainer) -> None:
        parallelize_model(self)
        if self.distributed and self.device.type == "cpu":
            registry.register("distributed", True)
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.model,
                find_unused_parameters=self.config.training.find_unused_parameters,
            )

    BaseTrainer._set_device = _set_device
    BaseTrainer.parallelize_model = _parallelize_model


def torchrun_local_rank() -> None:
    """Under ``torchrun`` (``distributed.no_spawn``) each rank trains on its ``LOCAL_RANK``."""
    import mmf_cli.run as cli

    distributed_main = cli.distributed_main

    @functools.wraps(distributed_main)
    def distributed_main_on_local_rank(
        device_id: int, configuration: Any, predict: bool = False
    ) -> Any:
        config = configuration.get_config()
        if config.distributed.get("no_spawn") and "LOCAL_RANK" in os.environ:
            device_id = int(os.environ["LOCAL_RANK"])
        return distributed_main(device_id, configuration, predict)

    cli.distributed_main = distributed_main_on_local_rank
