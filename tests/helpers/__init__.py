"""What several test folders share: the checkout, ``mmf_run``, and a tiny pre-training run
of the toy world (tiny random uvla, R-T / R-N / I-S with every 6th image held out)."""

import atexit
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from helpers.forked import HEAVY_NOT_MMF, ForkServer

REPO = Path(__file__).resolve().parents[2]
MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))


def tiny_uvla_template(
    project: str = "uvla/pretrain.yaml",
    lr: Optional[float] = None,
    scheduler: Optional[Dict[str, Any]] = None,
    **training: Any,
) -> str:
    """A tiny run of ``projects/<project>`` (the random tiny uvla at 64-d features) with
    ``training``'s keys and, given, the optimizer's ``lr`` and the scheduler's params; a
    template whose ``{repo}`` is the checkout (``project`` may hold placeholders too)."""
    lines = [
        "includes:",
        f"- {{repo}}/projects/{project}",
        "- {repo}/configs/models/uvla/tiny_random.yaml",
        "model_config:",
        "  uvla:",
        "    feature_dim: 64",
    ]
    if lr is not None:
        lines += ["optimizer:", "  params:", f"    lr: {lr}"]
    lines += ["training:", *(f"  {key}: {value}" for key, value in training.items())]
    if scheduler:
        lines += [
            "scheduler:",
            "  params:",
            *(f"    {key}: {value}" for key, value in scheduler.items()),
        ]
    return "\n".join(lines) + "\n"


TINY = tiny_uvla_template(
    lr=1e-3, batch_size=16, log_interval=1, evaluation_interval=1000, checkpoint_interval=4, seed=3
)
HOLDOUT = [
    f"dataset_config.uvla_{name}.holdout_every=6"
    for name in ("region_tag", "region_phrase", "image_sentence")
]


_SERVER: List[ForkServer] = []


def fork_server() -> ForkServer:
    """This process's fork server (helpers/forked.py, with :data:`HEAVY_NOT_MMF` imported),
    started at its first use and shared by every test that runs programs in it."""
    if not _SERVER or _SERVER[0].process.poll() is not None:
        _SERVER[:] = [ForkServer(HEAVY_NOT_MMF)]
        atexit.register(_SERVER[0].close)
    return _SERVER[0]


def mmf_run(*args: str, ok: bool = True, timeout: int = 600) -> str:
    """``mmf_run ARGS`` run from the checkout, in a child of the fork server (the console
    script as a fresh interpreter runs it, without paying torch's imports again): its output
    (stdout and stderr, in the order written); the test fails unless it exits with 0
    (``ok``), or with another status (``ok=False``)."""
    result = fork_server().run([MMF_RUN, *args], cwd=REPO, timeout=timeout)
    output = str(result["output"])
    assert result["returncode"] is not None, f"mmf_run {result['error']}\n{output[-4000:]}"
    assert (result["returncode"] == 0) == ok, output[-4000:]
    return output


def pretrain(
    tmp_path: Path, world: Path, save: Path, *opts: str, config: str = TINY, ok: bool = True
) -> str:
    path = tmp_path / "pretrain.yaml"
    path.write_text(config.format(repo=REPO))
    return mmf_run(
        f"config={path}", f"env.data_dir={world}", f"env.save_dir={save}", *HOLDOUT, *opts, ok=ok
    )


def train_log(save: Path) -> str:
    """MMF's log of the runs in ``save``, its full progress lines included (the console of
    the plugin's trainer shows short ones), or "" before the first run."""
    path = save / "train.log"
    return path.read_text() if path.exists() else ""


def rows(log: str, split: str = "train") -> List[Dict[str, str]]:
    """The fields of each of MMF's full progress lines of ``split`` in ``log``."""
    found = []
    for line in log.splitlines():
        if "progress:" in line and f"{split}/total_loss:" in line:
            found.append(dict(re.findall(r"(\S+): ([0-9.e-]+)", line)))
    return found


def same(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def assert_resume_at_12_is_the_uninterrupted_run(tmp_path: Path, world: Path) -> None:
    """A tiny pre-training of 16 updates resumed from its checkpoint at update 12 (R-T and
    R-N have then finished epoch 1) ends with the uninterrupted run's weights and data state."""
    opts = ["training.max_updates=16", "scheduler.params.num_warmup_steps=2"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    pretrain(tmp_path, world, straight, *opts)
    at_12 = torch.load(straight / "models/model_12.ckpt", weights_only=True)
    assert at_12["uvlp_run_state"]["data"]["finished"] != []
    # the run stopped right after its checkpoint at update 12 (as by a kill)
    (resumed / "models").mkdir(parents=True)
    shutil.copy(straight / "models/model_12.ckpt", resumed / "current.ckpt")
    pretrain(tmp_path, world, resumed, *opts, "checkpoint.resume=True")
    a = torch.load(straight / "current.ckpt", weights_only=True)
    b = torch.load(resumed / "current.ckpt", weights_only=True)
    assert (
        a["num_updates"] == b["num_updates"] == 16 and a["current_epoch"] == b["current_epoch"] == 2
    )
    assert a["uvlp_run_state"]["data"] == b["uvlp_run_state"]["data"]
    assert same(a["model"], b["model"]), "resumed weights differ from the uninterrupted run"
