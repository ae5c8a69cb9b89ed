"""Settings that make a training step faster without changing what it computes.

- :func:`fused_adamw_default`: AdamW runs PyTorch's fused kernel (one launch for every
  parameter, and a step it can skip on a device flag, see
  :class:`mmf_uvlp.trainers.finite_loss.DeferredFiniteCheck`) when every parameter is on a
  CUDA device; on a CPU it keeps PyTorch's default, so CPU results stay as they were.
- ``${uvlp_num_workers:}`` / ``${uvlp_pin_memory:}`` (the project configs'
  ``training.num_workers`` / ``training.pin_memory``): with a GPU, each DataLoader gets
  workers sized from the run's share of the CPUs (:func:`run_cpus`, :func:`default_num_workers`)
  and pins its batches
  (MMF then copies them with ``non_blocking=True``); without one, none and no pinning,
  as the training process computes on those cores itself.
- :func:`compile_mode` and :func:`compile_in_place` (``training.compile: True`` or a
  ``torch.compile`` mode, opt-in): the trainer has the model compile its encoder
  (``compile_for_training``), for launch-bound small models, with CUDA graphs in mode
  ``reduce-overhead``; a clear fallback to eager.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterable, List, Mapping, Optional

import torch

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.utils.run_log import write_run_log

logger = logging.getLogger(__name__)


# MMF builds one loader per pre-training dataset (R-T, R-N, I-S): they share the cores.
LOADERS_SHARING_CORES = 3
MAX_WORKERS = 4  # measured on one H200 (docs/benchmarks.md); more were not measured


def run_cpus() -> int:
    """The CPUs this run may use: ``OMP_NUM_THREADS`` when it is set to a number (the study
    runner sets it to each run's share, cpu_count / jobs, when runs share a machine), else
    the CPUs this process may run on (its affinity, as a scheduler such as SLURM sets it)."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # a platform without affinities
        return os.cpu_count() or 1


def default_num_workers(cpus: Optional[int] = None, gpu: Optional[bool] = None) -> int:
    """DataLoader workers per loader: with a GPU, the run's CPUs (``cpus``, default
    :func:`run_cpus`) but one, shared by the pre-training loaders (at least 1, at most
    :data:`MAX_WORKERS`); without a GPU, 0."""
    gpu = torch.cuda.is_available() if gpu is None else gpu
    if not gpu:
        return 0
    cpus = run_cpus() if cpus is None else cpus
    return max(1, min(MAX_WORKERS, (cpus - 1) // LOADERS_SHARING_CORES))


def default_pin_memory() -> bool:
    """Pin batches when a GPU trains."""
    return torch.cuda.is_available()


def register_resolvers() -> None:
    """``${uvlp_num_workers:}`` and ``${uvlp_pin_memory:}`` for the configs."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("uvlp_num_workers"):
        OmegaConf.register_new_resolver("uvlp_num_workers", lambda: default_num_workers())
    if not OmegaConf.has_resolver("uvlp_pin_memory"):
        OmegaConf.register_new_resolver("uvlp_pin_memory", default_pin_memory)


def parameter_tensors(params: Iterable[Any]) -> List[torch.Tensor]:
    """The tensors of an optimizer's ``params`` (tensors or parameter groups)."""
    tensors: List[torch.Tensor] = []
    for item in params:
        if isinstance(item, dict):
            tensors += list(item["params"])
        else:
            tensors.append(item)
    return tensors


def fused_adamw_default(params: Iterable[Any]) -> bool:
    """Whether AdamW should be fused: every parameter a floating-point CUDA tensor."""
    tensors = parameter_tensors(params)
    return bool(tensors) and all(t.is_cuda and t.is_floating_point() for t in tensors)


# ``training.compile``: True or a ``torch.compile`` mode. "reduce-overhead" adds CUDA graphs
# (one replay per step instead of a launch per kernel, for launch-bound small models; a graph
# is recorded per distinct batch shape) and is the same as "default" off CUDA.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


def compile_mode(training: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The ``torch.compile`` mode ``training.compile`` asks for (``training``: the run's
    ``training`` config; True: "default"), or None when it is unset or False."""
    from mmf_uvlp.errors import UserConfigError

    value = (training or {}).get("compile", False)
    if value is None or value is False:
        return None
    if value is True:
        return "default"
    if value not in COMPILE_MODES:
        raise UserConfigError(
            f"training.compile={value!r}: expected True, False or one of "
            f"{list(COMPILE_MODES)} (a torch.compile mode)"
        )
    return value


def compile_model(trainer: Any) -> None:
    """``training.compile`` (True or a ``torch.compile`` mode): the trainer's model compiles
    itself (its ``compile_for_training``); a model without that method is refused, naming
    the key, rather than left eager without a word."""
    mode = compile_mode(trainer.config.training)
    if mode is None:
        return
    compile_for_training = getattr(trainer.model, "compile_for_training", None)
    if compile_for_training is None:
        raise UserConfigError(
            f"training.compile={trainer.config.training.compile!r}: model "
            f"{trainer.config.model} cannot compile itself (no compile_for_training; uvla "
            "and the models built on it can); set training.compile=False"
        )
    compile_for_training(mode)


def compile_in_place(module: torch.nn.Module, what: str, mode: str = "default") -> bool:
    """``torch.compile`` ``module`` in place (its weights and their names unchanged) in
    ``mode``, with dynamic shapes (a batch is padded to its longest, so sizes vary). Where
    PyTorch cannot compile here the module stays eager, with a warning; a graph that fails
    to compile at its first call runs eagerly too (``torch._dynamo.config.suppress_errors``).
    Returns whether it was compiled."""
    import torch._dynamo as dynamo

    if not dynamo.is_dynamo_supported():
        logger.warning(
            "training.compile: torch.compile is not supported here (torch %s); %s runs eagerly",
            torch.__version__,
            what,
        )
        return False
    dynamo.config.suppress_errors = True
    module.compile(dynamic=True, mode=mode)
    write_run_log(
        f"training.compile: {what} compiled with torch.compile, mode {mode} (dynamic shapes; "
        "eager where a graph fails to compile)"
    )
    return True


def mark_cuda_graph_step() -> None:
    """Begin a new step of CUDA graphs (``torch.compiler.cudagraph_mark_step_begin``): the
    outputs of the previous step's replays may then be overwritten, which a step calls
    before it runs its compiled module again."""
    torch.compiler.cudagraph_mark_step_begin()
