"""The frozen settings group: how a group of settings takes the values it is given, and the
checks its fields share.

:class:`SettingsGroup` is the base of every group of :mod:`agentloop.orchestration.settings`.
A group reads nothing by itself: :func:`~agentloop.orchestration.settings.load_settings` is what
reads the environment and hands each group its variables. Blank values count as unset; ``repr``
masks the password of every URL field. A field's check names the field's variable in its error
(:func:`count`, :func:`seconds`, :func:`switch`), so every group says what is wrong the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agentloop.orchestration.redaction import redact_url

__all__ = ["SettingsGroup", "as_float", "as_int", "count", "env_field", "seconds", "switch"]


def as_int(value: Any) -> int | None:
    """``value`` as an integer, ``None`` when it is not one."""
    try:
        return int(value) if isinstance(value, int | str) and not isinstance(value, bool) else None
    except ValueError:
        return None


def as_float(value: Any) -> float | None:
    """``value`` as a number, ``None`` when it is not one (or is NaN)."""
    try:
        number = (
            float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else None
        )
    except ValueError:
        return None
    return None if number is None or math.isnan(number) else number


class SettingsGroup(BaseSettings):
    """A frozen group of settings; each field reads the variable named by its ``validation_alias``."""

    model_config = SettingsConfigDict(
        frozen=True,
        validate_default=False,
        case_sensitive=True,
        env_ignore_empty=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
        use_attribute_docstrings=True,
    )
    #: Fields holding a URL, shown by ``repr`` with the password masked.
    _URL_FIELDS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the values given: ``load_settings`` is what reads the environment."""
        return (init_settings,)

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        """Strip text values and drop blank ones, so a blank variable means its default."""
        if not isinstance(data, Mapping):
            return data
        stripped = {key: value.strip() if isinstance(value, str) else value for key, value in data.items()}
        return {key: value for key, value in stripped.items() if value != ""}

    @classmethod
    def env_name(cls, field: str | None) -> str:
        """The environment variable ``field`` is read from."""
        alias = cls.model_fields[str(field)].validation_alias
        return alias if isinstance(alias, str) else str(field)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name in self._URL_FIELDS and isinstance(value, str) else value


def env_field(name: str, default: Any = None) -> Any:
    """A field read from the variable ``name``."""
    return Field(default, validation_alias=name)


def count(value: Any, name: str, *, least: int = 0) -> int:
    """``value`` as an integer of at least ``least`` (0 or 1); ``ValueError`` naming ``name``."""
    number = as_int(value)
    if number is None or number < least:
        kind = "non-negative" if least == 0 else "positive"
        raise ValueError(f"{name} must be a {kind} integer, not {value!r}")
    return number


def seconds(value: Any, name: str, *, positive: bool = False) -> float:
    """``value`` as a finite number of seconds, above 0 when ``positive``, else at least 0;
    ``ValueError`` naming ``name``."""
    number = as_float(value)
    if number is None or math.isinf(number) or number < 0 or (positive and number == 0):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be a {kind} number of seconds, not {value!r}")
    return number


def switch(value: Any, name: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case) as a bool; ``ValueError`` naming ``name``."""
    text = value.strip().lower() if isinstance(value, str) else value
    if text in {"1", "true", "yes", "on", True}:
        return True
    if text in {"0", "false", "no", "off", False}:
        return False
    raise ValueError(f"{name} must be 1/true/yes/on or 0/false/no/off, not {value!r}")
