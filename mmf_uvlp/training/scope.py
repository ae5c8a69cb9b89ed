"""Which runs get the plugin's training behaviour: plugin runs and runs that ask for it.

The fixes MMF needs to import and run on the modern stack apply to every MMF run. The
plugin's own training behaviour (seeded resumable data order, resumable checkpoints, the
seed-0 fix, command-line value checks, one-line errors, the run lock, the non-finite loss
check, ...) applies only to a *plugin run*: its model, one of its datasets, or a processor
or loss of those, is registered by mmf_uvlp; or its config sets
``training.uvlp_behaviour: True``. ``training.uvlp_behaviour: False`` turns it off for a
plugin run too; left ``None`` (the default), the run's components decide.

Patches of the behaviour are installed once per process (with MMF's import) and decide at
each call, from the run's config registered in MMF's registry, whether to act
(:func:`plugin_only`).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Iterable, List, Optional, Sequence

BEHAVIOUR_KEY = "training.uvlp_behaviour"
PLUGIN_PACKAGE = "mmf_uvlp"
# MMF's registry getters of the kinds of component a config names
_GETTERS = {"model": "get_model_class", "dataset": "get_builder_class",
            "processor": "get_processor_class", "loss": "get_loss_class"}

_LAST: List[Any] = [None, None]  # the config last decided on, and its reason


def _select(config: Any, key: str, default: Any = None) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(config, key, default=default)
    except Exception:  # an unresolvable interpolation elsewhere does not matter here
        return default


def _of_plugin(kind: str, name: Any) -> bool:
    if not isinstance(name, str) or not name:
        return False
    from mmf.common.registry import registry

    getter = getattr(registry, _GETTERS[kind], None)
    component = getter(name) if getter is not None else None
    return getattr(component, "__module__", "").split(".")[0] == PLUGIN_PACKAGE


def _dataset_names(config: Any) -> List[str]:
    datasets = _select(config, "datasets") or _select(config, "dataset") or ""
    if isinstance(datasets, str):
        return [name.strip() for name in datasets.split(",") if name.strip()]
    return [str(name) for name in datasets]


def _types(section: Any) -> Iterable[str]:
    """The ``type`` of each entry of a ``processors`` mapping or ``losses`` list."""
    if section is None:
        return []
    values = section.values() if hasattr(section, "values") else section
    return [entry.get("type") if hasattr(entry, "get") else entry for entry in values]


def reason(config: Any) -> Optional[str]:
    """Why the plugin's behaviour applies to the run of ``config``, or None."""
    if config is None:
        return None
    asked = _select(config, BEHAVIOUR_KEY)
    if asked is not None:
        return f"{BEHAVIOUR_KEY}={asked}" if asked else None
    model = _select(config, "model")
    if _of_plugin("model", model):
        return f"model {model} is the plugin's"
    for loss in _types(_select(config, f"model_config.{model}.losses") if model else None):
        if _of_plugin("loss", loss):
            return f"loss {loss} is the plugin's"
    for dataset in _dataset_names(config):
        if _of_plugin("dataset", dataset):
            return f"dataset {dataset} is the plugin's"
        for processor in _types(_select(config, f"dataset_config.{dataset}.processors")):
            if _of_plugin("processor", processor):
                return f"processor {processor} of dataset {dataset} is the plugin's"
    return None


def run_config() -> Any:
    """The config of the run in progress (MMF registers it when it builds it), or None."""
    from mmf.common.registry import registry

    return registry.get("config", None, no_warning=True)


def applies(config: Any = None) -> bool:
    """Whether the plugin's behaviour applies to the run of ``config`` (default: the
    registered run config; none registered: no run, so no)."""
    config = run_config() if config is None else config
    if config is None:
        return False
    if _LAST[0] is not config:
        _LAST[:] = [config, reason(config)]
    return _LAST[1] is not None


def asked_on_command_line(opts: Optional[Sequence[str]]) -> Optional[bool]:
    """The value of ``training.uvlp_behaviour=...`` among command-line ``opts``, if any."""
    for opt in opts or []:
        key, _, value = str(opt).partition("=")
        if key.strip() == BEHAVIOUR_KEY:
            return value.strip() == "True"
    return None


def gated(original: Callable, patched: Callable) -> Callable:
    """``patched`` where the plugin's behaviour applies to the registered run, else
    ``original``, decided at each call."""

    @functools.wraps(patched)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        return (patched if applies() else original)(*args, **kwargs)

    dispatch.__uvlp_original__ = original  # type: ignore[attr-defined]
    return dispatch


def _resolve(path: str) -> Any:
    module, _, attribute = path.partition(":")
    target = importlib.import_module(module)
    return getattr(target, attribute) if attribute else target


def plugin_only(install: Callable[[], None], *targets: str) -> Callable[[], None]:
    """``install``, whose replacements of functions of ``targets`` (``"module"`` or
    ``"module:Class"``) act only where the plugin's behaviour applies (:func:`gated`)."""

    @functools.wraps(install)
    def install_for_plugin_runs() -> None:
        objects = [_resolve(target) for target in targets]
        before = [dict(vars(obj)) for obj in objects]
        inherited = [{name: getattr(obj, name) for name in dir(obj) if name not in vars(obj)}
                     for obj in objects]
        install()
        for obj, own, other in zip(objects, before, inherited):
            for name, value in list(vars(obj).items()):
                original = own.get(name, other.get(name))
                if original is None or original is value:
                    continue
                if callable(value) and callable(original) and not isinstance(value, type):
                    setattr(obj, name, gated(original, value))

    return install_for_plugin_runs
