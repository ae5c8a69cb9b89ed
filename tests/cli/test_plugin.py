"""The plugin registers itself: no flags needed, and env.user_dir=mmf_uvlp works too."""

import subprocess
import sys
import textwrap

COMPONENTS = textwrap.dedent(
    """
    import argparse, sys
    from mmf.common.registry import registry
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports
    setup_imports()
    opts = ["model=uvla", "datasets=uvla_region_tag,refcoco_plus"] + sys.argv[1:]
    config = Configuration(argparse.Namespace(config_override=None, opts=opts)).get_config()
    assert "uvla" in config.model_config and "refcoco_plus" in config.dataset_config
    assert registry.get_model_class("uvla") is not None
    for name in ("uvla_region_tag", "uvla_region_phrase", "uvla_image_sentence", "refcoco_plus"):
        assert registry.get_builder_class(name) is not None, name
    for name in ("uvla_mlm", "uvla_mrc", "uvla_mrfr", "uvla_pmrtc", "uvla_itm"):
        assert registry.get_loss_class(name) is not None, name
    assert registry.get_metric_class("refcoco_accuracy") is not None
    print("registered")
    """
)


def _run(tmp_path, *opts):
    result = subprocess.run(
        [sys.executable, "-c", COMPONENTS, *opts],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("registered")


def test_components_registered_without_any_flag(tmp_path):
    _run(tmp_path)


def test_user_dir_option_from_any_directory(tmp_path):
    _run(tmp_path, "env.user_dir=mmf_uvlp")


def test_a_component_module_can_be_a_script_s_first_import(tmp_path):
    """Importing a component module first (a user's analysis script) registers everything,
    including the models that subclass ``uvla`` (once an ImportError: partial module)."""
    script = textwrap.dedent(
        """
        import importlib, sys
        for name in sys.argv[1:]:
            importlib.import_module(name)
        from mmf.common.registry import registry
        assert registry.get_model_class("vl_bert") and registry.get_model_class("uvla")
        assert registry.get_processor_class("uvla_pair_masking")
        print("registered")
        """
    )
    for first in ("mmf_uvlp.models.uvla", "mmf_uvlp.processors.region_tag_masking"):
        result = subprocess.run(
            [sys.executable, "-c", script, first],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert result.returncode == 0, f"{first}: {result.stderr[-3000:]}"
        assert result.stdout.strip().endswith("registered")
