"""Distributed training on a CPU-only torch: gloo process groups and spawned ranks.

MMF 1.0.0rc10's distributed path is CUDA-only (NCCL, ``.cuda()`` tensors, a world size
checked against the GPU count). With these patches ``distributed.world_size=N`` trains N
processes in sync over gloo where torch has no CUDA.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any, Iterator, Optional


@contextlib.contextmanager
def cuda_calls_to(device: Any) -> Iterator[None]:
    """Inside the block, ``Tensor.cuda()`` moves tensors to ``device`` instead."""
    import torch

    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda tensor, *args, **kwargs: tensor.to(device)
    try:
        yield
    finally:
        torch.Tensor.cuda = original



class _DistributedWithoutNCCL(types.ModuleType):
    """``torch.distributed`` as seen by mmf.utils.distributed on a CPU-only torch.

    rc10 treats "NCCL unavailable" as "not distributed"; with gloo, a process
    group exists without NCCL, so availability means ``dist.is_available()``.
    """

    def __getattr__(self, item: str) -> Any:
        import torch.distributed

        if item == "is_nccl_available":
            return torch.distributed.is_available
        return getattr(torch.distributed, item)


def cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()


def install_gloo() -> None:
    """MMF 1.0.0rc10's distributed init, device and DDP wrapping over gloo on a CPU-only torch."""
    import torch

    import mmf.utils.distributed as distributed
    from mmf.common.registry import registry
    from mmf.trainers.base_trainer import BaseTrainer

    distributed.dist = _DistributedWithoutNCCL("torch.distributed")
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


def _distributed_main_then_shut_down(device_id: int, configuration: Any, predict: bool) -> None:
    """One spawned rank: MMF's ``distributed_main``, then the gloo group torn down by all
    ranks together. Left to interpreter exit, a rank aborted now and then with "terminate
    called without an active exception" (SIGABRT) while gloo's threads were still joinable."""
    import torch.distributed as dist

    import mmf_cli.run as cli

    cli.distributed_main(device_id, configuration, predict)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def install_spawn() -> None:
    """``mmf_run distributed.world_size=N`` spawns N gloo processes on a CPU-only torch."""
    import random

    import torch

    import mmf_cli.run as cli

    run = cli.run

    @functools.wraps(run)
    def run_cpu_processes_too(opts: Optional[list] = None, predict: bool = False) -> Any:
        cli.setup_imports()
        configuration = _configuration_from(opts)
        config = configuration.get_config()
        world_size = config.distributed.world_size
        if not (cpu_only() and world_size > 1 and config.distributed.init_method is None):
            return run(opts, predict)
        cli.infer_init_method(config)
        if config.distributed.init_method is not None:
            return run(opts, predict)
        config.start_rank = 0
        config.distributed.init_method = f"tcp://localhost:{random.randint(10000, 20000)}"
        config.distributed.rank = None
        torch.multiprocessing.spawn(
            fn=_distributed_main_then_shut_down, args=(configuration, predict), nprocs=world_size
        )

    def _configuration_from(opts: Optional[list]) -> Any:
        import argparse

        if opts is None:
            args = cli.flags.get_parser().parse_args()
        else:
            args = argparse.Namespace(config_override=None, opts=opts)
        configuration = cli.Configuration(args)
        configuration.args = args
        return configuration

    cli.run = run_cpu_processes_too
