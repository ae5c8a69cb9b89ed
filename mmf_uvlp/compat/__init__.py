"""Compatibility layer: real, unmodified MMF on a modern Python / torch stack.

This package is the only place where MMF's behaviour is adjusted. It installs a
``sys.meta_path`` hook (from ``mmf_uvlp_compat.pth``, so in every process of the
environment, spawned workers and pytest included). The hook reads the installed
MMF version from the package metadata and picks the fixes written for it; each
fix is triggered by the first import of a top-level module (``mmf``, or a
library that MMF needs shimmed, such as ``torchvision``) and runs either
*before* that module's code executes (module aliases, library shims) or *after*
it (patches of MMF's classes). After ``import mmf`` the mmf_uvlp plugin
components are registered. MMF 1.0.0rc10 (the package index) and 1.0.0rc12 (MMF's
main branch, installed from source) each have a fix set (``rc10.py``, ``mmf_main.py``); for
another version nothing is patched. The plugin's own training behaviour is not a fix: it is
the ``uvlp`` trainer (``mmf_uvlp.trainers``), which a run chooses by name, and its hooks at
MMF's command line (``mmf_uvlp.training.entry_point``), which this hook installs beside the
fixes.

The hook finds ``mmf`` with the finders that follow it on ``sys.meta_path`` (an editable
MMF is served by a finder of its own, not by ``sys.path``), so the plugin registers
exactly once whatever the layout: MMF from the index or editable from source, the plugin
installed editable, as a wheel, or only imported through ``env.user_dir`` (MMF is then
imported already: the "post" fixes run at once, which suffices for MMF main's).

Importing this package is cheap: it touches neither torch nor MMF.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Set

from mmf_uvlp.compat.fix import ENTRY_POINT, Fix, FixSet
from mmf_uvlp.utils.mmf_version import (  # noqa: F401  (the package's names for them)
    MMF_MAIN_VERSION,
    RC10_VERSION,
    installed_mmf_version,
)

if TYPE_CHECKING:
    from mmf_uvlp.training.entry_point import Hook


_STATE: Dict[str, object] = {"installed": False, "active": None, "mmf_version": None}


_FIX_SETS: Dict[str, FixSet] = {}


def fix_set_for(version: Optional[str]) -> Optional[FixSet]:
    """The fixes written for ``version`` (its module's MMF fixes), then the plugin's hooks at
    MMF's command line (:mod:`mmf_uvlp.training.entry_point`), or None (the layer stays
    inert)."""
    if version not in (RC10_VERSION, MMF_MAIN_VERSION):
        return None
    if version not in _FIX_SETS:
        from mmf_uvlp.training.entry_point import hooks_for

        if version == MMF_MAIN_VERSION:
            from mmf_uvlp.compat.mmf_main import FIXES
        else:
            from mmf_uvlp.compat.rc10 import FIXES
        hooks = [
            Fix(hook.name, hook.changes, _installer(hook), hook.trigger, "post", ENTRY_POINT)
            for hook in hooks_for(version)
        ]
        _FIX_SETS[version] = FixSet(version, FIXES.fixes + hooks)
    return _FIX_SETS[version]


def _installer(hook: "Hook") -> Callable[[], None]:
    """Puts ``hook``'s wrapper in the place of the MMF function it wraps."""

    def install() -> None:
        owner, attribute = hook.target()
        setattr(owner, attribute, hook.wrap(getattr(owner, attribute)))

    return install


DISABLE_VARIABLE = "MMF_UVLP_DISABLE_FIXES"


def disabled_fixes() -> List[str]:
    """Fix names listed in ``$MMF_UVLP_DISABLE_FIXES`` (comma-separated), for diagnosis."""
    return [
        name.strip() for name in os.environ.get(DISABLE_VARIABLE, "").split(",") if name.strip()
    ]


def _run(fixes: Sequence[Fix], trigger: str, stage: str) -> None:
    disabled = disabled_fixes()
    for fix in fixes:
        if fix.trigger != trigger or fix.stage != stage or fix.applied:
            continue
        if fix.name in disabled:
            fix.failure = f"disabled by ${DISABLE_VARIABLE}"
            continue
        try:
            fix.apply()
            fix.applied = True
        except Exception as exc:  # reported by `python -m mmf_uvlp.doctor`
            fix.failure = f"{type(exc).__name__}: {exc}"
            raise


class _FixingLoader(importlib.abc.Loader):
    """Wraps a module's own loader: runs the fixes it triggers around its execution."""

    def __init__(self, wrapped: importlib.abc.Loader, fix_set: Optional[FixSet], name: str):
        self._wrapped = wrapped
        self._fix_set = fix_set
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self._fix_set is not None:
            _run(self._fix_set.fixes, self._name, "pre")
        self._wrapped.exec_module(module)
        if self._fix_set is not None:
            _run(self._fix_set.fixes, self._name, "post")
        if self._name == "mmf":
            from mmf_uvlp.plugin import register_components

            register_components()


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of each trigger module until it is imported.

    The module's spec comes from the finders after this one on ``sys.meta_path``
    (``PathFinder`` for an installed MMF, setuptools' editable finder for MMF
    installed with ``pip install -e``). ``importlib.util.find_spec`` probes
    (transformers does this for torchvision) also reach here, so the wrapped spec
    is returned until the module exists.
    """

    def __init__(self, fix_set: Optional[FixSet]):
        self._fix_set = fix_set
        self._pending = frozenset(fix_set.triggers() if fix_set else []) | {"mmf"}
        self._searching: Set[str] = set()

    def find_spec(self, fullname: str, path, target=None):
        if fullname not in self._pending or fullname in sys.modules or fullname in self._searching:
            return None
        self._searching.add(fullname)
        try:
            spec = self._spec_from_other_finders(fullname, path, target)
        finally:
            self._searching.discard(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _FixingLoader(spec.loader, self._fix_set, fullname)
        return spec

    def _spec_from_other_finders(self, fullname: str, path, target):
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if isinstance(finder, _Finder) or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


def _apply_to_imported(fix_set: FixSet) -> None:
    """The plugin came after MMF (only ``env.user_dir``): the "post" fixes of modules already
    imported run now; their "pre" fixes are too late and say so."""
    for trigger in fix_set.triggers():
        if trigger not in sys.modules:
            continue
        for fix in fix_set.fixes:
            if fix.trigger == trigger and fix.stage == "pre" and not fix.applied:
                fix.failure = (
                    f"too late: {trigger} was imported before mmf_uvlp; install the "
                    "plugin, whose .pth hook imports it first"
                )
        _run(fix_set.fixes, trigger, "post")


def install() -> None:
    """Install the import hook once per process.

    Fixes of modules imported later run around their import; when MMF is imported already
    (the plugin was imported through ``env.user_dir``), see :func:`_apply_to_imported`.
    """
    if _STATE["installed"]:
        return
    _STATE["installed"] = True
    version = installed_mmf_version()
    _STATE["mmf_version"] = version
    _STATE["active"] = fix_set = fix_set_for(version)
    if fix_set is not None:
        _apply_to_imported(fix_set)
    sys.meta_path.insert(0, _Finder(fix_set))


def active_fix_set() -> Optional[FixSet]:
    """The fix set chosen for the installed MMF version (None: the layer is inert)."""
    return _STATE["active"]  # type: ignore[return-value]
