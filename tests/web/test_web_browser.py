"""The run viewer in a real headless Chromium: a composite started on the worker, its branches
watched going from running to done in the page, over SSE, with no reload; at 1280 and 1400 px the
runs list stays out of the run pane. Screenshots are kept under ``tests/artifacts/``.

Needs Debian's ``chromium`` (``.ci/run`` installs it); elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from cdp import chromium_binary, headless_chromium
from web_support import TOKENS, WebRig, auth, live_server

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
KEYS = ["north", "south", "east"]
ROWS = (
    "JSON.stringify([...document.querySelectorAll('#tree tbody tr')]"
    ".map(r => [r.dataset.path, r.dataset.status]))"
)


def branch_statuses(rows_json: str) -> dict[str, str]:
    rows = json.loads(rows_json)
    return {path.rsplit("/", 1)[1]: status for path, status in rows if "/branch/" in path}


async def test_the_viewer_shows_a_composite_s_branches_go_from_running_to_done(web_rig: WebRig) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on the PATH: apt-get install chromium (.ci/run does)")
    gate = web_rig.gate()
    app = web_rig.web()
    with live_server(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            started = await client.post(
                "/runs",
                json={"runnable": "web.gated", "input": {"gate": str(gate), "keys": KEYS}},
                headers=auth("all"),
            )
        run_id = started.json()["id"]
        async with headless_chromium(binary) as page:
            await page.navigate(f"{base}/ui/#token={TOKENS['read']}&run={run_id}")
            running = await page.wait_for(
                f"(() => {{ const s = {ROWS}; const b = JSON.parse(s).filter(r => r[0].includes('/branch/'));"
                " return b.length === 3 && b.every(r => r[1] === 'running') ? s : null; })()",
                what="three running branches",
            )
            await page.evaluate("window.__sameDocument = true")
            assert "token" not in await page.evaluate("location.href")  # taken out of the address
            await page.screenshot(ARTIFACTS / "web-viewer-running.png")

            gate.touch()
            await page.wait_for(
                "document.getElementById('run-status').textContent === 'succeeded'", what="the end"
            )
            done = await page.evaluate(ROWS)
            same_document = await page.evaluate("window.__sameDocument === true")
            graph_boxes = await page.evaluate("document.querySelectorAll('#graph .node').length")
            listed = await page.wait_for(
                f"document.querySelector('#runs tr[data-run=\"{run_id}\"].status-succeeded') !== null",
                what="the run in the list, succeeded",
            )
            shot = await page.screenshot(ARTIFACTS / "web-viewer-run.png")

    print(f"\nviewer screenshots: {ARTIFACTS / 'web-viewer-running.png'} and {shot}")
    assert branch_statuses(running) == dict.fromkeys(KEYS, "running")
    assert branch_statuses(done) == dict.fromkeys(KEYS, "done")
    assert dict(json.loads(done))[""] == "done"  # the root pipeline
    assert same_document, "the page reloaded"
    assert graph_boxes == 4 and listed  # pipeline, composite, its branch loop, the tally stage


#: Every cell of the runs list that reaches into the run pane: ``[text, right edge, pane's left edge]``.
OVERLAPS = """(() => {
  const pane = document.getElementById('run').getBoundingClientRect().left;
  const cells = [...document.querySelectorAll('#runs th, #runs td')];
  return JSON.stringify(cells.filter(c => c.getBoundingClientRect().right > pane + 0.5)
    .map(c => [c.textContent, c.getBoundingClientRect().right, pane]));
})()"""


@pytest.mark.parametrize("width", [1280, 1400])
async def test_the_runs_list_does_not_overlap_the_run_pane(web_rig: WebRig, width: int) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on the PATH: apt-get install chromium (.ci/run does)")
    names = ["record_search.demo", "agentloop.examples.record_search.workflows.RecordSearchBatch"]
    run_ids = [f"layout-{width}-{n}-{uuid.uuid4().hex}" for n in range(len(names))]
    for run_id, name in zip(run_ids, names, strict=True):
        web_rig.store.create_run(run_id=run_id, runnable=name, input=None, principal="web-tests")
        web_rig.store.finish_run(run_id, status="succeeded", output=None)
    with live_server(web_rig.web()) as base:
        async with headless_chromium(binary, width=width, height=900) as page:
            await page.navigate(f"{base}/ui/#token={TOKENS['read']}&run={run_ids[0]}")
            await page.wait_for(
                f"document.querySelector('#runs tr[data-run=\"{run_ids[1]}\"]') !== null"
                " && !document.getElementById('run').hidden",
                what="the runs listed and one shown",
            )
            overlaps = json.loads(await page.evaluate(OVERLAPS))
            shot = await page.screenshot(ARTIFACTS / f"web-viewer-layout-{width}.png")

    print(f"\nviewer layout screenshot: {shot}")
    assert overlaps == [], f"cells of the runs list reach into the run pane at {width} px: {overlaps}"
