"""The launcher forms documented for several GPUs, run here as CPU processes over gloo:
`torchrun --nproc_per_node=2 mmf_run ...` (env://, one process per rank, each on the device
LOCAL_RANK names) trains uvla with bf16 mixed precision, ranks in sync."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import HOLDOUT, REPO, tiny_uvla_template


BIN = Path(sys.executable).parent
TINY = tiny_uvla_template(
    batch_size=8, log_interval=2, evaluation_interval=1000, checkpoint_interval=4, seed=3
)


@pytest.mark.slow
def test_torchrun_two_ranks_with_bf16_stay_in_sync_and_train(tiny_corpus, tmp_path):
    config, save = tmp_path / "pretrain.yaml", tmp_path / "save"
    config.write_text(TINY.format(repo=REPO))
    command = [
        str(BIN / "torchrun"),
        "--standalone",
        "--nproc_per_node=2",
        str(BIN / "mmf_run"),
        f"config={config}",
        f"env.data_dir={tiny_corpus.parent}",
        f"env.save_dir={save}",
        *HOLDOUT,
        "training.max_updates=4",
        "scheduler.params.num_warmup_steps=1",
        "training.fp16=True",
        "training.amp_dtype=bfloat16",
        "training.trainer=rank_dump",
        f"env.user_dir={REPO / 'tests/plugins/rank_dump'}",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Distributed Init (Rank 1): env://" in output
    assert "autocast to torch.bfloat16 on cpu" in output
    final = [torch.load(save / f"params_final_rank{rank}_of2.pt") for rank in (0, 1)]
    init = torch.load(save / "params_init_rank0_of2.pt")
    assert all(torch.equal(final[0][name], final[1][name]) for name in final[0])
    changed = [name for name in init if not torch.equal(init[name], final[0][name])]
    assert len(changed) > len(init) // 2, f"only {len(changed)} of {len(init)} tensors changed"
    assert torch.load(save / "current.ckpt", weights_only=False)["num_updates"] == 4
