"""Mistakes in what a user wrote (config files, command-line overrides), reported in one line.

``mmf_run`` prints a :class:`UserConfigError` as ``mmf_run: error: <message>`` and exits
with status 2 (see ``mmf_uvlp/compat``), instead of a stack trace.
"""

from __future__ import annotations

import ast
import os
from typing import Any, Iterable, List, Optional, Tuple

import yaml

from omegaconf import OmegaConf

from mmf_uvlp.errors import UserConfigError

# Spellings that YAML reads as booleans/null but Python's literal_eval (MMF's command
# line) keeps as strings; the value is the spelling MMF expects.
_YAML_SPELLINGS = {
    "true": "True",
    "false": "False",
    "null": "None",
    "none": "None",
    "yes": "True",
    "no": "False",
    "on": "True",
    "off": "False",
    "~": "None",
}


def _key_values(opts: Iterable[str]) -> List[Tuple[str, str]]:
    opts = list(opts)
    if opts and "=" in opts[0]:
        return [tuple(opt.split("=", 1)) for opt in opts]  # type: ignore[misc]
    return list(zip(opts[0::2], opts[1::2]))


def check_command_line_literals(
    config: Any, opts: Optional[Iterable[str]], existing_only: bool = False
) -> None:
    """Refuse ``key=true``-style overrides of boolean / null keys.

    MMF decodes command-line values with ``ast.literal_eval``: ``true`` stays the string
    ``'true'``, which every ``if config.x is True`` then silently ignores. A key whose
    current value is a boolean or null (or that does not exist yet) must be given as
    ``True`` / ``False`` / ``None``; string-valued keys may take any text.
    ``existing_only``: check only keys whose current value is a boolean (a partial config).
    """
    for key, value in _key_values(opts or []):
        spelling = _YAML_SPELLINGS.get(value.strip().lower())
        if spelling is None or value.strip() == spelling:
            continue
        current = OmegaConf.select(config, key, default=None, throw_on_missing=False)
        if isinstance(current, bool) or (current is None and not existing_only):
            raise UserConfigError(
                f"command line: {key}={value} would be stored as the string {value!r} (MMF reads "
                f"command-line values as Python literals); write {key}={spelling}"
            )


def _python_literal(value: str) -> bool:
    try:
        ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return False
    return True


def check_command_line_lists(config: Any, opts: Optional[Iterable[str]]) -> None:
    """Refuse list overrides that MMF would store wrongly or drop.

    ``key=[features/cc.lmdb]`` is not a Python literal, so MMF stores the string
    ``'[features/cc.lmdb]'`` and fails at the first batch; ``key[0]=x`` is dropped by
    MMF 1.0.0rc10's command-line merge. Both are refused with the spelling that works:
    the whole list as a Python literal.
    """
    for key, value in _key_values(opts or []):
        if "[" in key:
            base = key[: key.index("[")]
            current = OmegaConf.select(config, base, default=None, throw_on_missing=False)
            example = OmegaConf.to_container(current) if OmegaConf.is_list(current) else ["..."]
            raise UserConfigError(
                f"command line: {key}={value}: MMF does not set one item of a list; give the "
                f'whole list as a Python literal, e.g. "{base}={example!r}"'
            )
        text = value.strip()
        if text[:1] in "[{" and not _python_literal(text):
            try:
                parsed = yaml.safe_load(text)
            except yaml.YAMLError:
                parsed = None
            hint = (
                f'write "{key}={parsed!r}"'
                if isinstance(parsed, (list, dict))
                else "quote each string inside it"
            )
            raise UserConfigError(
                f"command line: {key}={value} is not a Python literal, so MMF would store the "
                f"string {value!r}; {hint}"
            )


def _data_path_values(node: Any, key: str) -> Iterable[Tuple[str, str, bool]]:
    """(config key, path, in a list) for every string under a dataset's config; MMF's
    ``a,b`` feature entries give one path each."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from _data_path_values(value, f"{key}.{name}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            for child, path, _ in _data_path_values(value, f"{key}[{index}]"):
                yield child, path, True
    elif isinstance(node, str) and node:
        for part in node.split(","):
            yield key, part.strip(), False


def missing_data_file_message(config: Any, error: BaseException) -> Optional[str]:
    """One line naming the dataset key whose file ``error`` did not find, or None.

    ``error`` (and what caused it) names an absolute path; a string under
    ``dataset_config.<dataset>`` of the run's datasets that, relative to the dataset's
    ``data_dir`` as MMF reads it, is that path (or a folder of it) and does not exist, is the
    key to set.
    """
    texts, seen, visited = [], error, set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        texts += [str(seen), str(getattr(seen, "filename", "") or "")]
        seen = seen.__cause__ or seen.__context__
    names = config.get("datasets", None) or ""
    names = names.split(",") if isinstance(names, str) else list(names)
    for dataset in (name.strip() for name in names):
        node = OmegaConf.select(config, f"dataset_config.{dataset}", default=None)
        if node is None:
            continue
        try:
            values = OmegaConf.to_container(node, resolve=True)
        except Exception:  # an unresolvable config has other errors to report
            continue
        data_dir = values.get("data_dir") or OmegaConf.select(config, "env.data_dir", default="")
        for key, value, in_list in _data_path_values(values, f"dataset_config.{dataset}"):
            path = os.path.normpath(
                value if os.path.isabs(value) else os.path.join(str(data_dir), value)
            )
            if os.path.exists(path) or not any(path in text for text in texts):
                continue
            where = "" if os.path.isabs(value) else f" (relative to data_dir {data_dir})"
            list_key = key.rsplit("[", 1)[0]
            spelling = f"{list_key}=['<file>']" if in_list else f"{key}=<file>"
            return f"{key}={value!r}: {path} does not exist{where}; set {spelling}"
    return None


# the folders a run writes, by config key, with what else a user can set
WRITTEN_FOLDERS = (
    ("env.tensorboard_logdir", "the TensorBoard folder", " or training.tensorboard=False"),
    ("env.save_dir", "the run's save folder", ""),
)


def unwritable_folder_message(config: Any, error: BaseException) -> Optional[str]:
    """One line naming the folder and its key when ``error`` (or what caused it) is an
    ``OSError`` on a path inside a folder the run writes (``env.save_dir``,
    ``env.tensorboard_logdir``), or None."""
    import errno

    seen, visited = error, set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        if isinstance(seen, OSError) and seen.filename:
            path = os.path.abspath(os.fsdecode(seen.filename))
            for key, what, other in WRITTEN_FOLDERS:
                folder = OmegaConf.select(config, key, default=None)
                if not folder:
                    continue
                folder = os.path.abspath(str(folder))
                if path == folder or path.startswith(folder + os.sep):
                    code = errno.errorcode.get(seen.errno or 0, "no error code")
                    return (
                        f"cannot write {what} {folder} ({key}): {code} "
                        f"({seen.strerror or seen}) at {path}; set {key}=<a folder you "
                        f"can write>{other}"
                    )
        seen = seen.__cause__ or seen.__context__
    return None
