"""Where evaluations are kept: one JSON file each under the per-user home, ``AGENTLOOP_HOME/evals/``.

Not in the run store: an evaluation compares versions of the code on a developer's machine or in CI,
while the run store is the deployment's (often a production database); a file needs no migration, is
the same document as ``--write-json`` writes, and can be kept as a CI artifact and compared anywhere.
The runs of an evaluation on Celery are in the run store all the same, each case's under its run id.

A report is written whole or not at all (a temporary file renamed over), so an evaluation stopped
mid-write leaves no half report. :func:`load_report` takes a path, an id, or an id's unique prefix.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from agentloop.orchestration.errors import EvaluationInputError
from agentloop.orchestration.evals.report import EvalReport

__all__ = ["evals_folder", "keep_report", "kept_reports", "load_report", "write_json"]


def evals_folder(home: Path) -> Path:
    """The folder of the kept evaluations under ``home`` (``AGENTLOOP_HOME``)."""
    return home / "evals"


def write_json(path: Path, document: object) -> Path:
    """``document`` as JSON at ``path``, written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(document, file, ensure_ascii=False, indent=1, default=str)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def keep_report(home: Path, report: EvalReport) -> Path:
    """Keep ``report`` under ``home``; returns its file."""
    return write_json(evals_folder(home) / f"{report.id}.json", report.to_dict())


def _read(path: Path) -> EvalReport:
    try:
        return EvalReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except OSError as error:
        raise EvaluationInputError(f"cannot read {str(path)!r}: {error.strerror or error}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise EvaluationInputError(f"{path} is not an evaluation report: {error}") from None


def load_report(home: Path, reference: str) -> EvalReport:
    """The evaluation ``reference`` names: a report file's path, else a kept evaluation's id or the
    unique start of one."""
    given = Path(reference)
    if given.suffix == ".json" or given.is_file():
        return _read(given)
    folder = evals_folder(home)
    exact = folder / f"{reference}.json"
    if exact.is_file():
        return _read(exact)
    matches = sorted(folder.glob(f"{reference}*.json")) if reference and folder.is_dir() else []
    if len(matches) == 1:
        return _read(matches[0])
    if matches:
        ids = ", ".join(match.stem for match in matches[:5])
        raise EvaluationInputError(f"{reference!r} is the start of several evaluations: {ids}")
    raise EvaluationInputError(f"no evaluation {reference!r} in {folder} (nor a report file of that name)")


def kept_reports(home: Path, *, limit: int = 20) -> list[EvalReport]:
    """The latest kept evaluations, newest first (files that are no report are passed over)."""
    folder = evals_folder(home)
    reports = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            reports.append(_read(path))
        except EvaluationInputError:
            continue
    return sorted(reports, key=lambda report: report.created_at, reverse=True)[:limit]
