"""An evaluation's HTML page, and a comparison's, opened in a real headless Chromium: self-contained
(nothing loaded from anywhere), every user text shown as text (a case whose id and input hold markup
and a script runs nothing), one row per case. Screenshots are kept under ``tests/artifacts/``.

Needs Debian's ``chromium`` (``.ci/run`` installs it); elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from eval_support import invoke, write_dataset

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


async def test_the_report_and_the_comparison_open_in_a_browser_with_user_text_escaped(
    eval_home: Path,
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "web"))
    try:
        from cdp import chromium_binary, headless_chromium
    finally:
        sys.path.remove(str(ROOT / "tests" / "web"))
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on the PATH: apt-get install chromium (.ci/run does)")
    write_dataset(
        eval_home / "cases.jsonl",
        [
            {"id": "hi", "input": "hi", "expected": "HI"},
            {"id": HOSTILE, "input": HOSTILE, "expected": "<b>nope</b>"},
            {"id": "boom", "input": "boom", "expected": "BOOM"},
        ],
    )
    # the command runs its own event loop: in a thread of its own, as from a shell
    before = json.loads(
        (await asyncio.to_thread(invoke, "eval", "evals.shout", "cases.jsonl", "--json")).stdout
    )
    after = await asyncio.to_thread(
        invoke,
        "eval",
        "evals.shout",
        "cases.jsonl",
        "-c",
        '{"whisper": true}',
        "--write-html",
        "report.html",
        "--json",
    )
    compared = invoke(
        "eval", "compare", before["id"], json.loads(after.stdout)["id"], "--write-html", "diff.html"
    )
    assert compared.exit_code == 1  # "hi" regressed

    async with headless_chromium(binary) as page:
        await page.navigate((eval_home / "report.html").as_uri())
        rows = await page.wait_for(
            "document.readyState === 'complete' && document.querySelectorAll('#cases tbody tr').length",
            what="the cases table",
        )
        shown = await page.evaluate("document.querySelector('#cases').textContent")
        injected = await page.evaluate(
            "[window.pwned, document.querySelectorAll('body script, #cases img, #cases b').length]"
        )
        loaded = await page.evaluate("performance.getEntriesByType('resource').map(r => r.name)")
        cards = await page.evaluate("document.querySelector('.cards').textContent")
        report_shot = await page.screenshot(ARTIFACTS / "eval-report.png")

        await page.navigate((eval_home / "diff.html").as_uri())
        changes = await page.wait_for(
            "document.readyState === 'complete' && JSON.stringify([...document.querySelectorAll("
            "'#changes tbody tr')].map(r => [r.dataset.case, r.className]))",
            what="the changes table",
        )
        compare_shot = await page.screenshot(ARTIFACTS / "eval-compare.png")

    print(f"\nevaluation screenshots: {report_shot} and {compare_shot}")
    assert rows == 3
    assert HOSTILE in shown and "<b>nope</b>" in shown  # the markup is text on the page ...
    assert injected == [None, 0]  # ... and none of it became an element or ran
    assert loaded == []  # nothing fetched: the page is self-contained
    assert "0/3" in cards  # whispered: nothing matches
    assert json.loads(changes)[0] == ["hi", "regressed"]
