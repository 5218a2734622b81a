"""An evaluation, or a comparison of two, as one self-contained HTML page.

No external asset: the style is inline, there is no script, and the page's Content-Security-Policy
allows nothing else to load. Every piece of text that comes from a dataset, an output, a scorer or
a setting goes through :func:`_text` (``html.escape``, quotes included): a case whose output holds
``<script>`` shows those characters. Long values are cut (:data:`MAX_CHARS`); the JSON report has
them whole.

``html.escape`` rather than a template engine: the page is two tables, and agentloop does not
depend on one (jinja2 comes only with the docs tools).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from typing import Any

from agentloop.orchestration.evals.compare import Comparison
from agentloop.orchestration.evals.report import CaseResult, EvalReport

__all__ = ["MAX_CHARS", "comparison_html", "report_html"]

#: The most characters of one value (an input, an output) shown in a cell.
MAX_CHARS = 2000

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.meta{color:#5b6475;margin:0 0 16px}.meta b{color:#1d2330;font-weight:600}
table{border-collapse:collapse;width:100%;margin:8px 0}
th,td{border:1px solid #d8dde6;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f9;font-weight:600}
pre{margin:0;white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid #d8dde6;border-radius:6px;padding:8px 14px}
.card .n{font-size:20px;font-weight:700}
.pass{color:#0a7d33;font-weight:600}.fail{color:#b3261e;font-weight:600}.muted{color:#5b6475}
tr.regressed td,tr.case-fail td{background:#fdf0ef}tr.fixed td{background:#eefaf1}
"""


def _text(value: Any) -> str:
    """``value`` as escaped HTML text: strings as they are, anything else as JSON; cut at MAX_CHARS."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1, default=str)
    if len(text) > MAX_CHARS:
        text = f"{text[:MAX_CHARS]}… ({len(text) - MAX_CHARS} more characters in the JSON report)"
    return html.escape(text, quote=True)


def _error(error: Any) -> Any:
    """A run's recorded error as ``Type: message`` when it has that shape."""
    if isinstance(error, Mapping) and "type" in error and "message" in error:
        return f"{error['type']}: {error['message']}"
    return error


def _verdict(passed: bool | None) -> str:
    if passed is None:
        return '<span class="muted">—</span>'
    return '<span class="pass">pass</span>' if passed else '<span class="fail">fail</span>'


def _page(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'\">",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_text(title)}</title><style>{_STYLE}</style></head><body>",
            *body,
            "</body></html>",
        ]
    )


def _meta(report: EvalReport) -> str:
    code, model = report.code, report.model
    parts = [
        f"<b>{_text(report.id)}</b>",
        f"{_text(report.created_at)}",
        f"ran {_text(report.mode)} in {report.duration_seconds:.1f}s",
        f"dataset {_text(report.dataset.get('path'))}"
        f" (sha256 {_text(str(report.dataset.get('sha256'))[:12])})",
        f"model <b>{_text(model.get('description') or model.get('name'))}</b>",
        f"code git {_text(code.get('git') or 'none')}, source {_text(str(code.get('source_sha256'))[:12])}"
        f", agentloop {_text(code.get('agentloop'))}",
    ]
    if report.judge:
        parts.append(f"judge <b>{_text(report.judge.get('description'))}</b>")
    return '<p class="meta">' + " · ".join(parts) + "</p>"


def _cards(pairs: Iterable[tuple[str, Any]]) -> str:
    cells = (f'<div class="card"><div class="n">{_text(str(v))}</div>{_text(k)}</div>' for k, v in pairs)
    return '<div class="cards">' + "".join(cells) + "</div>"


def _score_cell(case: CaseResult, name: str) -> str:
    score = case.scores.get(name)
    if score is None:
        return '<td class="muted">—</td>'
    reason = f'<div class="muted">{_text(score.reason)}</div>' if score.reason else ""
    return f'<td><span class="{"pass" if score.passed else "fail"}">{score.value:.2f}</span>{reason}</td>'


def report_html(report: EvalReport) -> str:
    """The page of one evaluation: its summary, each scorer's mean, and a row per case."""
    aggregate = report.aggregate()
    scorer_rows = "".join(
        f"<tr><td>{_text(name)}</td><td>{_text(str(values['mean']))}</td>"
        f"<td>{values['passed']}</td><td>{values['errors']}</td></tr>"
        for name, values in aggregate["scorers"].items()
    )
    head = "".join(f"<th>{_text(name)}</th>" for name in report.scorers)
    rows = []
    for case in report.cases:
        expected = (
            f"<pre>{_text(case.expected)}</pre>" if case.has_expected else '<span class="muted">—</span>'
        )
        error = (
            f'<div class="fail">{_text(_error(case.error))}</div>'
            if case.error and case.status != "succeeded"
            else ""
        )
        rows.append(
            f'<tr class="case-{"pass" if case.passed else "fail"}" data-case="{_text(case.id)}">'
            f"<td>{_text(case.id)}</td><td>{_text(case.status)}{error}</td><td>{_verdict(case.passed)}</td>"
            + "".join(_score_cell(case, name) for name in report.scorers)
            + f"<td><pre>{_text(case.input)}</pre></td><td><pre>{_text(case.output)}</pre></td>"
            f"<td>{expected}</td></tr>"
        )
    runs = ", ".join(f"{count} {status}" for status, count in aggregate["runs"].items())
    return _page(
        f"Evaluation of {report.runnable}",
        [
            f"<h1>Evaluation of {_text(report.runnable)}</h1>",
            _meta(report),
            _cards(
                [
                    ("passed", f"{aggregate['passed']}/{aggregate['cases']}"),
                    ("pass rate", f"{aggregate['pass_rate']:.0%}"),
                    ("runs", runs),
                    ("tokens in/out", f"{aggregate['input_tokens']}/{aggregate['output_tokens']}"),
                ]
            ),
            "<h2>Scorers</h2><table><thead><tr><th>scorer</th><th>mean</th><th>passed</th><th>errors</th>"
            f"</tr></thead><tbody>{scorer_rows}</tbody></table>",
            f'<h2>Cases</h2><table id="cases"><thead><tr><th>id</th><th>run</th><th>verdict</th>{head}'
            f"<th>input</th><th>output</th><th>expected</th></tr></thead><tbody>{''.join(rows)}</tbody></table>",
        ],
    )


def _side(label: str, report: EvalReport) -> str:
    aggregate = report.aggregate()
    return (
        f"<tr><td>{_text(label)}</td><td>{_text(report.id)}</td><td>{_text(report.created_at)}</td>"
        f"<td>{_text(report.code.get('git') or 'none')}</td>"
        f"<td>{_text(str(report.code.get('source_sha256'))[:12])}</td>"
        f"<td>{_text(report.model.get('description') or report.model.get('name'))}</td>"
        f"<td>{aggregate['passed']}/{aggregate['cases']}</td></tr>"
    )


def _delta_cell(scores: Mapping[str, tuple[float, float]]) -> str:
    parts = [
        f"{_text(name)}: {old:.2f} → {new:.2f} ({new - old:+.2f})" for name, (old, new) in scores.items()
    ]
    return "<br>".join(parts) or '<span class="muted">—</span>'


def comparison_html(comparison: Comparison) -> str:
    """The page of a comparison: both evaluations, the counts of each kind of change, and the
    changed cases, regressions first (unchanged cases are counted, not listed)."""
    before, after = comparison.before, comparison.after
    rows = "".join(
        f'<tr class="{_text(change.kind)}" data-case="{_text(change.id)}"><td>{_text(change.id)}</td>'
        f"<td>{_text(change.kind)}</td><td>{_verdict(change.before_passed)} "
        f'<span class="muted">{_text(change.before_status or "")}</span></td>'
        f"<td>{_verdict(change.after_passed)} "
        f'<span class="muted">{_text(change.after_status or "")}</span></td>'
        f"<td>{_delta_cell(change.scores)}</td></tr>"
        for change in comparison.changes
        if change.kind != "same"
    )
    note = (
        ""
        if before.dataset.get("sha256") == after.dataset.get("sha256")
        else '<p class="fail">The two evaluations ran on different datasets.</p>'
    )
    return _page(
        f"Comparison of {before.id} and {after.id}",
        [
            f"<h1>{_text(before.runnable)}: {_text(before.id)} → {_text(after.id)}</h1>",
            note,
            "<table><thead><tr><th></th><th>evaluation</th><th>created</th><th>git</th><th>source</th>"
            f"<th>model</th><th>passed</th></tr></thead><tbody>{_side('before', before)}"
            f"{_side('after', after)}</tbody></table>",
            _cards(comparison.counts().items()),
            '<h2>Changed cases</h2><table id="changes"><thead><tr><th>id</th><th>change</th><th>before</th>'
            f"<th>after</th><th>scores</th></tr></thead><tbody>{rows}</tbody></table>",
        ],
    )
