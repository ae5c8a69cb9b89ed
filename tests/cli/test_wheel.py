"""The plugin as a wheel: built from this checkout, installed into a scratch virtual
environment next to MMF 1.0.0rc10, and pre-training through `mmf_run` on the tiny world
without the checkout in sight (default configs and the compatibility hook come from the
wheel)."""

import configparser
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from helpers import HOLDOUT, REPO


MMF_RUN = "import sys; from mmf_cli.run import run; sys.argv[0] = 'mmf_run'; sys.exit(run())"

pytestmark = pytest.mark.slow


def _pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> Path:
    """A venv holding only the wheel; this environment's libraries (torch, MMF rc10, ...)
    are on its path as a plain folder, so neither its editable mmf_uvlp nor its .pth
    hooks are."""
    root = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "-w", str(root / "dist"), str(REPO))
    (wheel,) = (root / "dist").glob("mmf_uvlp-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "_rc10_libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _pip("--python", str(python), "install", "--no-deps", "--no-index", str(wheel))
    mmf_run = venv / "bin" / "mmf_run"  # MMF's console script, as installing MMF writes it
    mmf_run.write_text(f"#!{python}\n{MMF_RUN.replace('; ', chr(10))}\n")
    mmf_run.chmod(0o755)
    return python


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_wheel_carries_configs_and_hook(wheel_env, tmp_path):
    program = (
        "import mmf, mmf_uvlp\n"
        "from mmf.common.registry import registry\n"
        "from mmf_uvlp import compat\n"
        "from mmf_uvlp.utils.config_files import configs_dir\n"
        "print(mmf_uvlp.__file__, configs_dir(), registry.get_model_class('uvla').config_path())\n"
        "print(compat.active_fix_set().mmf_version, all(f.applied for f in compat.active_fix_set().fixes "
        "if f.trigger == 'mmf'))\n"
    )
    result = subprocess.run(
        [str(wheel_env), "-c", program],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    module, configs, uvla_defaults = result.stdout.split("\n")[0].split()
    package = Path(module).parent
    assert str(REPO) not in module and package.parent.name == "site-packages", module
    assert configs == str(package / "configs") and Path(uvla_defaults).is_file()
    assert uvla_defaults == str(package / "configs/models/uvla/defaults.yaml")
    assert result.stdout.split("\n")[1] == "1.0.0rc10 True"


def test_pretraining_runs_from_the_wheel(wheel_env, tiny_corpus, tmp_path):
    project = tmp_path / "projects" / "uvla"
    project.mkdir(parents=True)
    for name in ("pretrain.yaml", "toy_world.yaml"):  # the run config and the world it reads
        (project / name).write_text((REPO / "projects/uvla" / name).read_text())
    save = tmp_path / "save"
    command = [
        str(wheel_env),
        "-c",
        MMF_RUN,
        "config=projects/uvla/pretrain.yaml",
        f"env.data_dir={tiny_corpus.parent}",
        f"env.save_dir={save}",
        "model_config.uvla.feature_dim=64",
        "training.max_updates=3",
        "training.batch_size=16",
        "training.log_interval=1",
        "training.evaluation_interval=3",
        "training.checkpoint_interval=3",
        *HOLDOUT,
    ]
    result = subprocess.run(
        command, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=600
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    logged = (save / "train.log").read_text()  # MMF's full progress lines
    assert "progress: 3/3" in logged and "val/uvla_region_tag/uvla_mlm" in logged, output[-4000:]
    assert (save / "current.ckpt").is_file() and (save / "uvla_final.pth").is_file()


def test_the_wheel_installs_the_console_scripts(wheel_env, tmp_path):
    """Every ``[project.scripts]`` entry is in the wheel's entry_points.txt and installed
    into the venv's bin/, where it runs without the checkout in sight."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    (wheel,) = (wheel_env.parents[2] / "dist").glob("mmf_uvlp-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [
            n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")
        ]
        parser = configparser.ConfigParser()
        parser.read_string(archive.read(entry_points).decode())
    assert dict(parser["console_scripts"]) == scripts and len(scripts) == 14
    for script in scripts:
        assert (wheel_env.parent / script).is_file(), script
    for script, expected in (
        ("uvlp-report", "usage: uvlp-report"),
        ("uvlp-make-toy-world", "usage: uvlp-make-toy-world"),
    ):
        result = subprocess.run(
            [str(wheel_env.parent / script), "--help"],
            cwd=tmp_path,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.startswith(expected), result.stdout[:500]
    front = subprocess.run(
        [str(wheel_env.parent / "uvlp")],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert front.returncode == 0, front.stderr[-3000:]
    assert "site-packages/mmf_uvlp):" in front.stdout and "    pretrain.yaml " in front.stdout
    assert "uvlp-replicate " in front.stdout, front.stdout[-2000:]


def test_the_study_plans_and_runs_its_steps_from_the_wheel(wheel_env, tmp_path):
    """``uvlp-replicate`` of the wheel, run outside the checkout, finds its projects and
    recipes in the package and spawns its tools as ``python -m mmf_uvlp.cli.<tool>``: it
    plans a tiny study, then runs it (the tiny world, Base fine-tuned on VQA2 for 2 updates)."""
    replicate = wheel_env.parent / "uvlp-replicate"
    options = [
        "--world",
        "tiny",
        "--seeds",
        "1",
        "--systems",
        "base",
        "--tasks",
        "vqa2",
        "--tables",
        "1",
        "--finetune-updates",
        "2",
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "out"),
    ]
    plan = subprocess.run(
        [str(replicate), *options, "--plan"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    assert f"-m mmf_uvlp.cli.make_toy_world --preset tiny --seed 0 --out {tmp_path}" in plan.stdout
    assert "config=projects/uvla/finetune/vqa2.yaml" in plan.stdout and str(REPO) not in plan.stdout
    run = subprocess.run(
        [str(replicate), *options],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    finetuned = tmp_path / "data/replication/toy_world_tiny/base/seed0/vqa2"
    assert (finetuned / "step.json").is_file() and "test/vqa2/vqa_accuracy" in (
        finetuned / "train.log"
    ).read_text()
    assert not (REPO / "mmf_uvlp" / "projects").exists()  # the checkout reads its own projects/
