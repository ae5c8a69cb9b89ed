"""MMF's own visual_bert through a real ``mmf_run`` on the tiny toy world: the training
block of its runs, the width of MMF's VQA answers, the run itself."""

from pathlib import Path

from helpers import mmf_run


FEATURE_DIM = 64  # the tiny preset's feature dimension


def num_answers(world: Path) -> int:
    """Width of MMF's vqa_answer targets: the vocabulary plus the <unk> MMF adds."""
    from mmf.utils.text import VocabDict

    return VocabDict(str(world / "mmf/vqa2/vocabs/answers_vqa.txt")).get_size()


TRAINING = """
training:
  batch_size: 8
  max_updates: 4
  log_interval: 2
  evaluation_interval: 2
  checkpoint_interval: 2
  num_workers: 0
  seed: 1
scheduler:
  params:
    num_warmup_steps: 1
    num_training_steps: 6
"""


def run_visual_bert(
    config: Path, world: Path, save_dir: Path, *opts: str, timeout: int = 600
) -> str:
    return mmf_run(
        f"config={config}",
        f"env.data_dir={world}",
        f"env.save_dir={save_dir}",
        f"model_config.visual_bert.visual_embedding_dim={FEATURE_DIM}",
        *opts,
        timeout=timeout,
    )
