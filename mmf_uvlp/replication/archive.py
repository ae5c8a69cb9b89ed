"""A study's finished runs kept in the repository, so that a study can be resumed anywhere.

A study can take longer than a machine or its ``data/`` folder is kept, and its runs folder
(checkpoints included) need not survive. ``replicate --archive DIR`` keeps what the
tables read of every finished step, its ``step.json`` and ``train.log`` (a few KB, meant to
be committed), in ``DIR`` at the step's place in the runs folder. Paths in an archived
command are written relative to the study: ``<runs>`` (the runs folder), ``<world>`` (the
world's folder) and ``<repo>``, and the program (``mmf_run`` or ``python``, which the
comparison of commands ignores) as ``<bin>/<name>``, the folder of this interpreter when
read back: another clone in another folder reads them back, and re-archives them unchanged.

Before a study runs, every step the runs folder lacks but ``DIR`` holds is restored into it:
it is then done (its metrics are in ``train.log``), its recorded command is compared with
the planned one as for any finished run, and a step whose output only it read (a
pre-training whose fine-tunings all finished) is not run again for its weights (see
``runner.run_steps``). Every finished step is archived when it ends, and the finished steps
of an existing runs folder when the study starts; an archived copy made by the same
command stays as it is, unless it is a pre-training made again that wrote other weights (its
record's ``weights_sha256``): the new copy is archived, since the fine-tunings still to run
read its weights, and the earlier one is kept beside it as ``step.earlier<k>.json`` and
``train.earlier<k>.log`` (:data:`EARLIER`), the run the fine-tunings already archived read.
To run a step again, delete it from the archive as well as from the runs folder.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from mmf_uvlp.replication.provenance import WEIGHTS_MADE
from mmf_uvlp.replication.runner import load_record
from mmf_uvlp.replication.steps import Settings, Step
from mmf_uvlp.replication.study import REPO
from mmf_uvlp.report.results import LOG_FILE

BIN = "<bin>"  # an archived command's program folder: this interpreter's when restored
EARLIER = "earlier"  # step.earlier<k>.json: an archived run superseded by one made again


@dataclass(frozen=True)
class Archive:
    """The archive folder ``root`` of the study whose settings are ``settings``."""

    root: Path
    settings: Settings

    def _places(self) -> list[tuple[str, str]]:
        """(absolute path, placeholder), the longest path first."""
        places = [
            (str(self.settings.runs), "<runs>"),
            (str(self.settings.world.path), "<world>"),
            (str(REPO), "<repo>"),
        ]
        return sorted(places, key=lambda place: -len(place[0]))

    def relative(self, text: str) -> str:
        """``text`` with the study's folders as placeholders."""
        for path, name in self._places():
            text = text.replace(path, name)
        return text

    def absolute(self, text: str) -> str:
        """``text`` with the placeholders as this study's folders."""
        for path, name in self._places():
            text = text.replace(name, path)
        return text

    @staticmethod
    def _program(command: list[str], folder: str) -> list[str]:
        """``command`` with its program in ``folder`` (the rest as it is)."""
        return [f"{folder}/{Path(command[0]).name}", *command[1:]] if command else command

    def _files(self, step: Step) -> list[tuple[Path, Path]]:
        """(file in the runs folder, its archived copy) of ``step``: its record, and its
        ``train.log`` when its folder is in the runs folder (a run, not the world)."""
        runs = self.settings.runs
        pairs = [(step.record, self.root / step.record.relative_to(runs))]
        if step.folder.is_relative_to(runs):
            log = step.folder / LOG_FILE
            pairs.append((log, self.root / log.relative_to(runs)))
        return pairs

    def holds(self, step: Step) -> bool:
        """Whether ``step`` is archived."""
        return all(copy.exists() for _, copy in self._files(step))

    def store(self, step: Step) -> bool:
        """Archive a finished ``step`` (its record with relative paths), replacing a copy made
        by another command; a copy made by the same command stays as it is (a world made
        again from the archive's record, as ``replicate --recorded`` does for the trivial
        rates, leaves the archive unchanged). False when it has no record (run outside a
        study)."""
        files = self._files(step)
        if not all(source.exists() for source, _ in files):
            return False
        record = load_record(step.record)
        record["command"] = self._program([self.relative(arg) for arg in record["command"]], BIN)
        archived = self.root / step.record.relative_to(self.settings.runs)
        if self.holds(step):
            kept = load_record(archived)
            if kept["command"] == record["command"]:
                made = record.get(WEIGHTS_MADE)
                if made is None or kept.get(WEIGHTS_MADE) == made:
                    return True
                self._set_aside(files)
        for source, copy in files:
            copy.parent.mkdir(parents=True, exist_ok=True)
            if source == step.record:
                copy.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            else:
                shutil.copyfile(source, copy)
        return True

    @staticmethod
    def _set_aside(files: list[tuple[Path, Path]]) -> None:
        """Move the archived copies in ``files`` to the first free ``<stem>.earlier<k>``
        names (``step.earlier1.json``, ``train.earlier1.log``)."""
        copies = [copy for _, copy in files]
        k = 1
        while any(
            copy.with_name(f"{copy.stem}.{EARLIER}{k}{copy.suffix}").exists() for copy in copies
        ):
            k += 1
        for copy in copies:
            copy.rename(copy.with_name(f"{copy.stem}.{EARLIER}{k}{copy.suffix}"))

    def restore(self, step: Step) -> bool:
        """Bring an archived ``step`` the runs folder lacks into it; False when the runs
        folder has its record or the archive does not hold it."""
        if step.record.exists() or not self.holds(step):
            return False
        for target, copy in self._files(step):
            target.parent.mkdir(parents=True, exist_ok=True)
            if target == step.record:
                record = load_record(copy)
                record["command"] = self._program(
                    [self.absolute(arg) for arg in record["command"]],
                    str(Path(sys.executable).parent),
                )
                target.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            else:
                shutil.copyfile(copy, target)
        return True
