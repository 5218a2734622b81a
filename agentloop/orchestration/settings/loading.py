"""Reading the environment, here and nowhere else: :func:`load_settings` and :func:`env_names`.

One table, :data:`GROUPS`, says which group of settings sits where under :class:`Settings`; it
drives both the loading and the list of variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource

from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.settings.deployment import Settings
from agentloop.orchestration.settings.group import SettingsGroup
from agentloop.orchestration.settings.http import HttpSettings
from agentloop.orchestration.settings.metrics import MetricsSettings
from agentloop.orchestration.settings.model import ModelSettings
from agentloop.orchestration.settings.provider import ProviderSettings
from agentloop.orchestration.settings.store import StoreSettings
from agentloop.orchestration.settings.tracing import TracingSettings

__all__ = ["GROUPS", "env_names", "load_settings"]

G = TypeVar("G", bound=SettingsGroup)

#: Every group below :class:`Settings`, by where it sits (``model.provider``: the ``provider``
#: field of the ``model`` group), in the order their variables are listed.
GROUPS: dict[str, type[SettingsGroup]] = {
    "model": ModelSettings,
    "model.provider": ProviderSettings,
    "http": HttpSettings,
    "store": StoreSettings,
    "tracing": TracingSettings,
    "metrics": MetricsSettings,
}


class _MappingSource(EnvSettingsSource):
    """pydantic-settings' environment source, over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name: value for name, value in self._environ.items() if value.strip()}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """A field's variable; a field without one (a group such as ``model``) reads nothing."""
        if not isinstance(field.validation_alias, str):
            return None, field_name, False
        return super().get_field_value(field, field_name)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings the environment asks for (``environ`` defaults to ``os.environ``).

    Raises :class:`SettingsError` naming every malformed variable.
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []
    groups: dict[str, Any] = {path: _group(group, env, problems) for path, group in GROUPS.items()}
    for path in sorted(groups, key=lambda path: path.count("."), reverse=True):  # the deepest first
        parent, _, name = path.rpartition(".")
        if parent:
            groups[parent] = groups[parent].model_copy(update={name: groups.pop(path)})
    try:
        settings = Settings(**groups, **_MappingSource(Settings, env)())
    except ValidationError as error:
        problems.append(_describe(error))
    except SettingsError as error:  # raised while resolving a default (no result backend)
        problems.append(str(error))
    if problems:
        raise SettingsError("; ".join(problems))
    return settings


def _group(group: type[G], env: Mapping[str, str], problems: list[str]) -> G:
    """The group read from ``env``; its defaults, and its problems added to ``problems``, when malformed."""
    try:
        return group(**_MappingSource(group, env)())
    except ValidationError as error:
        problems.append(_describe(error))
        return group()


def _describe(error: ValidationError) -> str:
    """One line per problem, in the words of the validators (pydantic's own wording otherwise)."""
    problems = []
    for detail in error.errors():
        if detail["type"] == "default_factory_not_called":
            continue  # follows from another problem, already reported
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, Exception):
            problems.append(str(cause))
        else:
            where = ".".join(str(part) for part in detail["loc"])
            problems.append(f"{where}: {detail['msg']}" if where else detail["msg"])
    return "; ".join(dict.fromkeys(problems)) or str(error)


def env_names() -> tuple[str, ...]:
    """Every environment variable :func:`load_settings` reads, in field order."""
    names: list[str] = []
    groups: list[type[SettingsGroup]] = [Settings, *GROUPS.values()]
    for group in groups:
        names += [
            group.env_name(name)
            for name, field in group.model_fields.items()
            if isinstance(field.validation_alias, str)  # a group field reads no variable of its own
        ]
    return tuple(dict.fromkeys(names))
