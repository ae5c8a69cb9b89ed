"""Jobs on a Slurm cluster or as processes on this computer, through submitit.

``add_job_arguments`` gives a command line the options (``--executor slurm|local``, the
Slurm partition, time, GPUs, CPUs, memory, array parallelism and any other ``#SBATCH``
option); ``JobOptions.from_args`` reads them back and ``JobOptions.executor`` makes the
``submitit.AutoExecutor`` that submits the jobs, writing their logs, pickles and (on Slurm)
``sbatch`` scripts under a folder. The local executor runs each job as a child process with
the same time limit, so a laptop runs the same jobs the cluster does.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Tuple

EXECUTORS = ("local", "slurm")


@dataclass(frozen=True)
class JobOptions:
    """Where and with what resources jobs run (``None``: the cluster's default)."""

    executor: str = "local"
    partition: Optional[str] = None
    time_min: int = 24 * 60
    gpus: Optional[int] = None  # per job; None: none on Slurm, every visible GPU locally
    cpus: Optional[int] = None  # per job
    mem_gb: Optional[float] = None
    array_parallelism: Optional[int] = None  # jobs running at once (None: all on Slurm,
    # cpu_count on the local executor)
    slurm: Tuple[Tuple[str, str], ...] = field(default_factory=tuple)  # other #SBATCH options

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(
                f"--executor: expected one of {list(EXECUTORS)}, got {self.executor!r}"
            )
        for name in ("time_min", "gpus", "cpus", "mem_gb", "array_parallelism"):
            value = getattr(self, name)
            if value is not None and value < (0 if name == "gpus" else 1):
                raise ValueError(
                    f"--{name.replace('_', '-')}: expected a positive number, got {value}"
                )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "JobOptions":
        extra = []
        for item in args.slurm_option or ():
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(
                    f"--slurm-option {item!r}: expected KEY=VALUE, e.g. account=vision or qos=high"
                )
            extra.append((key.strip().replace("-", "_"), value))
        return cls(
            executor=args.executor,
            partition=args.partition,
            time_min=args.time,
            gpus=args.gpus,
            cpus=args.cpus,
            mem_gb=args.mem_gb,
            array_parallelism=args.array_parallelism,
            slurm=tuple(extra),
        )

    def parallelism(self) -> Optional[int]:
        """Jobs the launcher lets run at once (None: as many as the cluster schedules)."""
        if self.array_parallelism:
            return self.array_parallelism
        return None if self.executor == "slurm" else max(1, os.cpu_count() or 1)

    def threads(self, parallel: int) -> int:
        """CPU threads one job should use: its ``--cpus``, else (local) the cores shared by
        the jobs that run at once."""
        if self.cpus:
            return self.cpus
        if self.executor == "slurm":
            return 1
        return max(1, (os.cpu_count() or 1) // max(1, parallel))

    def executor_for(self, folder: Path, name: str):
        """A ``submitit.AutoExecutor`` writing under ``folder``, its jobs named ``name``."""
        import submitit

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        executor = submitit.AutoExecutor(folder=folder, cluster=self.executor)
        params: Dict[str, object] = {"name": name, "timeout_min": int(self.time_min)}
        if self.cpus:
            params["cpus_per_task"] = int(self.cpus)
        if self.mem_gb:
            params["mem_gb"] = float(self.mem_gb)
        gpus = self.gpus
        if gpus is None and self.executor == "local":
            gpus = _visible_gpus()  # the local executor hides the GPUs it is not given
        if gpus:
            params["gpus_per_node"] = int(gpus)
        if self.executor == "slurm":
            if self.partition:
                params["slurm_partition"] = self.partition
            if self.array_parallelism:
                params["slurm_array_parallelism"] = int(self.array_parallelism)
            if self.slurm:
                params["slurm_additional_parameters"] = dict(self.slurm)
        executor.update_parameters(**params)
        return executor


def _visible_gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def add_job_arguments(
    parser: argparse.ArgumentParser,
    default_executor: Optional[str] = "local",
) -> None:
    """The job options of ``JobOptions`` as command-line flags."""
    group = parser.add_argument_group("jobs (submitit)")
    default = default_executor or "none: not as submitit jobs"
    group.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=default_executor,
        help="slurm: sbatch jobs (arrays where there are several); local: child "
        f"processes of this computer (default {default})",
    )
    group.add_argument("--partition", help="Slurm partition")
    group.add_argument(
        "--time",
        type=int,
        default=24 * 60,
        help="time limit of one job in minutes (default 1440; the local "
        "executor stops a job at it too)",
    )
    group.add_argument(
        "--gpus", type=int, help="GPUs per job (default: none on Slurm, every visible GPU locally)"
    )
    group.add_argument("--cpus", type=int, help="CPUs per job (Slurm --cpus-per-task)")
    group.add_argument("--mem-gb", dest="mem_gb", type=float, help="memory per job in GB")
    group.add_argument(
        "--array-parallelism",
        dest="array_parallelism",
        type=int,
        help="jobs running at once (Slurm --array=...%%N; default: every job "
        "on Slurm, one per CPU locally)",
    )
    group.add_argument(
        "--slurm-option",
        dest="slurm_option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other #SBATCH option, e.g. account=vision, qos=high, "
        "constraint=volta32gb (repeatable)",
    )
