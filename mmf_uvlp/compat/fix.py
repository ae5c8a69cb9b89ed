"""A compatibility fix and the fixes written for one MMF version (:mod:`mmf_uvlp.compat`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional


ENTRY_POINT = "entry point"  # the kind of the plugin's hooks at MMF's command line


@dataclass
class Fix:
    """One compatibility fix: what it repairs and whether it ran."""

    name: str
    error: str
    apply: Callable[[], None]
    trigger: str  # top-level module whose first import runs the fix
    stage: str  # "pre": before the trigger module executes, "post": after it
    # "fix": MMF needs it on this stack; ENTRY_POINT: the plugin's behaviour at MMF's
    # command line (mmf_uvlp.training.entry_point), installed the same way
    kind: str = "fix"
    applied: bool = False
    failure: Optional[str] = None


@dataclass
class FixSet:
    """The fixes written for one MMF version."""

    mmf_version: str
    fixes: List[Fix] = field(default_factory=list)

    def fix(self, name: str, error: str, stage: str = "pre", trigger: str = "mmf") -> Callable:
        """Decorator registering ``fn`` as a fix repairing ``error``."""

        def decorator(fn: Callable[[], None]) -> Callable[[], None]:
            self.fixes.append(Fix(name, error, fn, trigger=trigger, stage=stage))
            return fn

        return decorator

    def triggers(self) -> List[str]:
        """Top-level modules whose first import runs some fix."""
        return sorted({fix.trigger for fix in self.fixes})
