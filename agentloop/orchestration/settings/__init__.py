"""The deployment's settings: every environment variable agentloop reads, read in one place
(``loading.py``) and nowhere else. Imports no Celery.

:func:`load_settings` reads the environment (or a mapping standing for it) once and returns a
frozen :class:`Settings`; every other part receives that object (the Celery adapter projects it
for Celery, ``celeryconfig.py`` exposes that projection). Every variable is optional, and an empty
or blank value counts as unset. A malformed value raises :class:`SettingsError`, whose message
names the variable. ``repr(settings)`` shows no secret and no password of a URL. Each field's
docstring names its variable and its default; :func:`env_names` lists them all.

The groups: :class:`Settings` (``deployment.py``: brokers, results, the run store, limits),
:class:`ModelSettings` (``model.py``) with :class:`ProviderSettings` (``provider.py``),
:class:`HttpSettings` (``http.py``), :class:`StoreSettings` (``store.py``),
:class:`TracingSettings` (``tracing.py``) and :class:`MetricsSettings` (``metrics.py``), all on
:class:`SettingsGroup` (``group.py``).
"""

from agentloop.orchestration.settings.deployment import Settings, default_home, schedule_entries
from agentloop.orchestration.settings.group import SettingsGroup
from agentloop.orchestration.settings.http import HttpSettings
from agentloop.orchestration.settings.loading import GROUPS, env_names, load_settings
from agentloop.orchestration.settings.metrics import MetricsSettings
from agentloop.orchestration.settings.model import ModelSettings
from agentloop.orchestration.settings.provider import ProviderSettings
from agentloop.orchestration.settings.store import StoreSettings
from agentloop.orchestration.settings.tracing import TracingSettings

__all__ = [
    "GROUPS",
    "HttpSettings",
    "MetricsSettings",
    "ModelSettings",
    "ProviderSettings",
    "Settings",
    "SettingsGroup",
    "StoreSettings",
    "TracingSettings",
    "default_home",
    "env_names",
    "load_settings",
    "schedule_entries",
]
