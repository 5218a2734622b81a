"""``agentloop eval list`` and ``eval compare`` as an 80-column terminal shows them (the CLI's real
output): every id, runnable, model description and hash whole on one line, never broken
mid-word; ``compare`` shows the outputs before and after of each regressed case."""

from __future__ import annotations

import json
from pathlib import Path

from eval_support import invoke, write_dataset

CASES = [
    {"id": "a-case-with-a-rather-long-name", "input": "hi", "expected": "HI"},
    {"id": "yo", "input": "yo", "expected": "YO"},
]


def evaluation(*args: str) -> dict[str, object]:
    result = invoke("eval", "evals.shout", "cases.jsonl", *args, "--json")
    assert result.exit_code in (0, 1), result.output
    report: dict[str, object] = json.loads(result.stdout)
    return report


def lines_of(output: str) -> list[str]:
    return output.splitlines()


def whole_on_a_line(text: str, output: str) -> bool:
    return any(text in line for line in lines_of(output))


def test_eval_list_and_compare_keep_every_word_whole_at_80_columns(eval_home: Path) -> None:
    write_dataset(eval_home / "cases.jsonl", CASES)
    before = evaluation()
    after = evaluation("--context", '{"whisper": true}')

    listed = invoke("eval", "list")
    compared = invoke("eval", "compare", str(before["id"]), str(after["id"]))

    assert listed.exit_code == 0 and compared.exit_code == 1
    for output in (listed.output, compared.output):
        assert all(len(line) <= 80 for line in lines_of(output)), output
    for report in (before, after):
        assert whole_on_a_line(str(report["id"]), listed.output), listed.output
    assert whole_on_a_line("evals.shout", listed.output)
    git = str(before["code"]["git"])  # type: ignore[index]
    source = str(before["code"]["source_sha256"])[:12]  # type: ignore[index]
    model = str(before["model"]["description"])  # type: ignore[index]
    assert whole_on_a_line(git, listed.output)
    assert whole_on_a_line(source, compared.output) and whole_on_a_line(model, compared.output), (
        compared.output
    )
    assert whole_on_a_line("a-case-with-a-rather-long-name", compared.output), compared.output
    # the regressed case's outputs, before and after, not only its score
    shown = lines_of(compared.output)
    at = next(
        i for i, line in enumerate(shown) if line.startswith("regressed a-case-with-a-rather-long-name")
    )
    assert shown[at + 1].split() == ["before", '"HI"'] and shown[at + 2].split() == ["after", '"hi"']
