"""The prepared GPU check (tools/bench/gpu_check.sh) runs every step with --dry-run on a
CPU, and writes each step's status and output into its one folder."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from helpers import REPO

STEPS = [
    "env",
    "world_study",
    "world_paper",
    "preflight",
    "sync",
    "window_study",
    "finetune",
    "study",
    "paper",
    "window_paper",
    "packed",
    "data_path",
]
TASKS = ("vqa2", "nlvr2", "visual_entailment", "refcoco_plus")


def _row(text: str, first_cell: str) -> list:
    """The cells of the markdown table row whose first cell is ``first_cell``."""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{text}")


def _figure(cell: str) -> float:
    value = float(cell)
    assert value > 0, cell
    return value


@pytest.mark.slow
def test_the_gpu_check_dry_run_runs_every_step(tiny_corpus, tmp_path):
    worlds = tmp_path / "worlds"
    worlds.mkdir()
    for name in ("study", "paper"):  # the dry run's sizes are the tiny world's
        (worlds / name).symlink_to(tiny_corpus.parent)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable)
    bundle = tmp_path / "back" / "gpu_check.tar.gz"
    result = subprocess.run(
        [
            "bash",
            str(REPO / "tools/bench/gpu_check.sh"),
            "--out",
            str(out),
            "--worlds",
            str(worlds),
            "--python",
            sys.executable,
            "--dry-run",
            "--bundle",
            str(bundle),
            "--step-cap",
            "900",
            "--budget",
            "3000",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=3000,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = [line.split()[0] for line in (out / "summary.txt").read_text().splitlines()]
    assert steps == STEPS
    assert all(" exit=0 " in line for line in (out / "summary.txt").read_text().splitlines())
    # a row for every figure: the like-for-like window, each task's fine-tuning step, uvla vs
    # visual_bert, the share of the bf16 peak at the large batch, the packed study
    window = _row((out / "window_study.md").read_text(), "study")
    isolated, through_mmf, ratio = (_figure(cell) for cell in window[2:5])
    assert ratio == pytest.approx(through_mmf / isolated, abs=0.01)
    finetune = (out / "finetune.md").read_text()
    assert all(_figure(_row(finetune, task)[2]) for task in TASKS)
    for table in ("study.md", "paper.md"):
        text = (out / table).read_text()
        assert _figure(_row(text, "uvla")[2]) and _figure(_row(text, "visual_bert")[2])
    assert "uvla at B=8 in bf16:" in (out / "paper.md").read_text()
    assert "of the bf16 matmul peak" in (out / "paper.md").read_text()
    _figure(_row((out / "window_paper.md").read_text(), "paper")[2])
    packed = _row((out / "packed.md").read_text(), "2")
    assert all(_figure(cell) for cell in packed[1:6]), packed
    preflight = (out / "preflight.log").read_text()
    assert "preflight: BERT" in preflight and "world " in preflight
    assert "resident_features=True samples/s" in (out / "data_path.md").read_text()
    assert "torch" in (out / "env.txt").read_text()
    with tarfile.open(bundle) as archive:  # the one file a GPU machine hands back
        names = archive.getnames()
    assert {
        "./summary.txt",
        "./study.md",
        "./paper.json",
        "./packed.md",
        "./window_study.md",
        "./finetune.md",
        "./packed/pack_2/run_0.log",
    } <= set(names)
    assert not [name for name in names if name.startswith(("./worlds", "./packed/pack_2/run_0/"))]


def test_a_failed_step_stops_none_after_it_and_the_bundle_holds_what_ran(tmp_path):
    """Every step fails at once (a python that exits 1): each is still run and recorded,
    and the bundle is written; a spent budget runs no step and says so."""
    bundle = tmp_path / "gpu_check.tar.gz"
    result = subprocess.run(
        [
            "bash",
            str(REPO / "tools/bench/gpu_check.sh"),
            "--out",
            str(tmp_path / "out"),
            "--python",
            "false",
            "--dry-run",
            "--bundle",
            str(bundle),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert result.returncode == 1 and [line.split()[0] for line in lines] == STEPS
    assert not [line for line in lines if " exit=0 " in line]
    with tarfile.open(bundle) as archive:
        assert {"./summary.txt", "./env.log", "./data_path.log"} <= set(archive.getnames())
    spent = subprocess.run(
        [
            "bash",
            str(REPO / "tools/bench/gpu_check.sh"),
            "--out",
            str(tmp_path / "spent"),
            "--python",
            "false",
            "--dry-run",
            "--budget",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = (tmp_path / "spent" / "summary.txt").read_text().splitlines()
    assert spent.returncode == 1 and len(lines) == len(STEPS)
    assert all(line.endswith("not run: the budget of 0 s is spent") for line in lines)


def test_the_gpu_check_refuses_unknown_arguments():
    result = subprocess.run(
        ["bash", str(REPO / "tools/bench/gpu_check.sh"), "--bogus"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "unknown argument --bogus" in result.stderr


def test_a_carried_corpus_is_kept_and_its_world_generated_beside_it(tmp_path):
    """--worlds with a corpus alone (built elsewhere, carried): --only world_study generates
    the world around it and keeps the corpus."""
    study = tmp_path / "worlds" / "study"
    (study / "corpus" / "annotations").mkdir(parents=True)
    (study / "corpus" / "annotations" / "carried.jsonl").write_text("{}\n")
    result = subprocess.run(
        [
            "bash",
            str(REPO / "tools/bench/gpu_check.sh"),
            "--out",
            str(tmp_path / "out"),
            "--worlds",
            str(tmp_path / "worlds"),
            "--python",
            sys.executable,
            "--dry-run",
            "--only",
            "world_study",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in summary] == ["world_study"]
    assert (study / "world.json").is_file() and (study / "features").is_dir()
    assert (study / "corpus" / "annotations" / "carried.jsonl").read_text() == "{}\n"
    assert "corpus kept" in (tmp_path / "out" / "world_study.log").read_text()


def _description(tmp_path):
    """MiniLM's description as gpu_carry.sh carries it: settings and tokenizer, no weights."""
    description = tmp_path / "bert"
    description.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(Path(os.environ["UVLP_BERT"]) / name, description / name)
    return description


def test_the_carry_size_check_fails_over_the_limit(tmp_path):
    """The carry folder plus the working tree against the device's 64 MiB: 60 MiB (a sparse
    file) beside the tracked files is over, 1 KiB is under."""
    check = ["bash", str(REPO / "tools/bench/gpu_carry.sh"), "--check-size", str(tmp_path)]
    (tmp_path / "small").write_bytes(b"x" * 1024)
    under = subprocess.run(check, capture_output=True, text=True)
    assert under.returncode == 0, under.stderr
    assert f"gpu_carry: {tmp_path} 0.0 MiB + working tree" in under.stdout
    assert under.stdout.rstrip().endswith("of 64 MiB")
    with open(tmp_path / "big", "wb") as f:
        f.truncate(60 * 1024 * 1024)
    over = subprocess.run(check, capture_output=True, text=True)
    assert over.returncode == 1
    assert "over the 64 MiB the device tool carries" in over.stderr
    assert subprocess.run(check + ["--limit-mib", "200"], capture_output=True).returncode == 0


def test_the_random_bert_is_seeded_and_loads_as_a_bert_folder(tmp_path):
    from transformers import AutoTokenizer, BertModel

    from mmf_uvlp.utils import bert_source

    description = _description(tmp_path)
    script = [
        sys.executable,
        str(REPO / "tools/bench/random_bert.py"),
        "--description",
        str(description),
    ]
    for out, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        subprocess.run(
            script + ["--out", str(tmp_path / out), "--seed", seed], check=True, capture_output=True
        )
    assert bert_source.folder_problem(str(tmp_path / "a")) is None
    models = [BertModel.from_pretrained(str(tmp_path / out)) for out in "abc"]
    settings = json.loads((description / "config.json").read_text())
    assert models[0].config.hidden_size == settings["hidden_size"]
    assert models[0].config.num_hidden_layers == settings["num_hidden_layers"]
    weights = [m.embeddings.word_embeddings.weight for m in models]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])
    assert AutoTokenizer.from_pretrained(str(tmp_path / "a")).vocab_size == settings["vocab_size"]
    (description / "vocab.txt").unlink()
    missing = subprocess.run(
        script + ["--out", str(tmp_path / "d")], capture_output=True, text=True
    )
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == f"random_bert: {description / 'vocab.txt'} is missing (the vocabulary)"
    )


@pytest.mark.skipif(sys.version_info[:2] == (3, 12), reason="the carry's wheels are for 3.12")
def test_a_carry_for_another_python_fails_the_install_and_the_bert_is_still_made(tmp_path):
    """--carry on a Python the wheels' tags do not fit: the install step fails naming the
    wheel (a dry run would skip it), the steps go on with the given python, and the bert step
    makes the random-weights BERT from the carried description."""
    carry = tmp_path / "carry"
    (carry / "wheels").mkdir(parents=True)
    (carry / "wheels" / "fakepkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"")
    shutil.move(_description(tmp_path), carry / "bert")
    env = {k: v for k, v in os.environ.items() if k != "UVLP_BERT"}
    result = subprocess.run(
        [
            "bash",
            str(REPO / "tools/bench/gpu_check.sh"),
            "--out",
            str(tmp_path / "out"),
            "--carry",
            str(carry),
            "--python",
            sys.executable,
            "--only",
            "env",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    summary = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in summary] == ["install", "bert", "env"]
    assert " exit=0 " not in summary[0] and " exit=0 " in summary[1] and result.returncode == 1
    log = (tmp_path / "out" / "install.log").read_text()
    assert "fakepkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl not installed" in log
    assert "1 carried wheel(s) cannot install on Python 3." in log
    assert (tmp_path / "out" / "bert" / "model.safetensors").is_file()


def test_a_regenerated_world_hashes_the_same_and_a_changed_value_does_not(tiny_world, tmp_path):
    """tools/bench/world_hash.py: the tiny world generated again (the same seed) has the hash
    stored for the first; one feature value changed in a copy fails the comparison, naming
    both hashes."""
    from mmf_uvlp.toy_world.config import PRESETS
    from mmf_uvlp.toy_world.generate import generate_world

    tool = [sys.executable, str(REPO / "tools/bench/world_hash.py")]
    stored = tmp_path / "world.sha256"
    subprocess.run(
        [*tool, str(tiny_world), "--write", str(stored)], check=True, capture_output=True
    )
    again = tmp_path / "again"
    generate_world(PRESETS["tiny"], again)
    same = subprocess.run(
        [*tool, str(again), "--against", str(stored)], capture_output=True, text=True
    )
    assert same.returncode == 0 and "the same as" in same.stdout, same.stderr
    for corpus in ("corpus", "corpus_bc"):  # the corpora built from the world are not the world
        (again / corpus).mkdir()
        (again / corpus / "anything.json").write_text("{}")
    assert subprocess.run([*tool, str(again), "--against", str(stored)]).returncode == 0
    npy = sorted(again.glob("features/*/*[0-9].npy"))[0]
    import numpy as np

    array = np.load(npy)
    array.flat[0] += 1.0
    np.save(npy, array)
    changed = subprocess.run(
        [*tool, str(again), "--against", str(stored)], capture_output=True, text=True
    )
    assert changed.returncode == 1
    assert f"{again} is not the world of {stored}" in changed.stderr
