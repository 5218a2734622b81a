"""Every setting's reference, read from the settings models: each variable ``load_settings`` reads,
its type, its default and its description (the field's docstring), group by group as
:data:`~agentloop.orchestration.settings.loading.GROUPS` places them under ``Settings``.
"""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path
from typing import Any

from pydantic_core import PydanticUndefined

from agentloop.orchestration.settings.deployment import Settings
from agentloop.orchestration.settings.group import SettingsGroup
from agentloop.orchestration.settings.loading import GROUPS, env_names
from docs.hooks.text import cell


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "None"
    if annotation is Path:
        return "path"
    if inspect.isclass(annotation) and origin is None:
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("pathlib.", "").replace("|", "\\|")


def default_of(field: Any) -> str:
    if field.default is PydanticUndefined:
        return "computed (see the description)" if field.default_factory else "(required)"
    value = field.default
    if value is None or value == () or value == "":
        return "unset"
    if isinstance(value, frozenset | set | tuple | list):
        return f"`{','.join(sorted(map(str, value)))}`"
    return f"`{value}`"


def group_table(group: type[SettingsGroup]) -> list[str]:
    rows = []
    for name, field in group.model_fields.items():
        if not isinstance(field.validation_alias, str):
            continue  # a group of its own, listed under its own heading
        description = cell(field.description or "").removeprefix(f"``{field.validation_alias}``: ")
        if not description:
            raise ValueError(f"{group.__name__}.{name} ({field.validation_alias}) has no description")
        variable, kind = field.validation_alias, type_name(field.annotation)
        rows.append(f"| `{variable}` | {kind} | {default_of(field)} | {description} |")
    return ["| variable | type | default | description |", "| --- | --- | --- | --- |", *rows, ""]


def settings_reference() -> str:
    """A table per settings group, every variable of :func:`env_names` in one of them."""
    groups: dict[str, type[SettingsGroup]] = {"": Settings, **GROUPS}
    lines: list[str] = []
    listed: list[str] = []
    for path, group in groups.items():
        where = f"`Settings.{path}`" if path else "`Settings`"
        lines += [
            f"## {group.__name__}",
            "",
            f"{where}: {cell(inspect.getdoc(group) or '').split('. ')[0].rstrip('.')}.",
            "",
        ]
        lines += group_table(group)
        listed += [
            f.validation_alias for f in group.model_fields.values() if isinstance(f.validation_alias, str)
        ]
    missing = set(env_names()) - set(listed)
    if missing:
        raise ValueError(f"variables read but not listed: {sorted(missing)}")
    return "\n".join(lines)
