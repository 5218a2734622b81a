"""The documentation site: ``make docs``'s strict build, its reference generated from the code, the
build's refusals, and the built index and a reference page opened in a real headless Chromium
(screenshots kept under ``tests/artifacts/``).

The build needs the ``docs`` extra (mkdocs, mkdocs-material, mkdocstrings), the browser Debian's
``chromium``: ``.ci/run`` installs both; elsewhere the tests that need one are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mkdocs", reason="the site needs the docs extra: pip install -e '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The site as ``make docs`` builds it (strict), in a folder of the test's own."""
    folder = tmp_path_factory.mktemp("site") / "site"
    built = mkdocs_build(ROOT / "mkdocs.yml", folder)
    assert built.returncode == 0, built.stderr
    yield folder


def test_the_api_reference_has_every_public_name(site: Path) -> None:
    import agentloop
    import agentloop.testing

    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    kit = (site / "reference" / "testing.html").read_text(encoding="utf-8")

    assert [name for name in agentloop.__all__ if f'id="agentloop.{name}"' not in api] == []
    assert [name for name in agentloop.testing.__all__ if f'id="agentloop.testing.{name}"' not in kit] == []


def test_the_cli_settings_graphql_and_wire_references_come_from_the_code(site: Path) -> None:
    import typer

    from agentloop.orchestration.cli import app
    from agentloop.orchestration.settings import env_names
    from agentloop.orchestration.wire import TASK_NAMES

    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    settings = (site / "reference" / "settings.html").read_text(encoding="utf-8")
    graphql = (site / "reference" / "graphql.html").read_text(encoding="utf-8")
    wire = (site / "reference" / "wire.html").read_text(encoding="utf-8")

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert [name for name in commands if f"agentloop {name}" not in cli] == []
    assert [name for name in env_names() if name not in settings] == []
    assert all(field in graphql for field in ("startRun", "cancelRun", "runProgress", "resumeRun"))
    assert [name for name in TASK_NAMES if name not in wire] == []
    assert "generated:" not in cli + settings + graphql + wire  # every marker replaced


def test_a_public_name_without_a_docstring_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mkdocs", reason="the site needs the docs extra: pip install -e '.[docs]'")
    from mkdocs.exceptions import PluginError

    from docs.hooks.api import reference

    package = tmp_path / "half_documented"
    package.mkdir()
    (package / "__init__.py").write_text(
        '"""A package."""\n__all__ = ["bare", "told"]\n\n\ndef bare():\n    pass\n\n\n'
        'def told():\n    """Says what it does."""\n',
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(PluginError, match=r"without a docstring: bare$"):
        reference("half_documented")


def test_an_unknown_generated_part_fails_the_build() -> None:
    pytest.importorskip("mkdocs", reason="the site needs the docs extra: pip install -e '.[docs]'")
    from mkdocs.exceptions import PluginError

    from docs.hooks.site import expand

    with pytest.raises(PluginError, match="no generator for <!-- generated: nothing -->"):
        expand("# A page\n\n<!-- generated: nothing -->\n", "page.md")


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    """The site's own validation rules, on a one-page site whose page links to a page that is not there."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python/name:", ""))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the guide](guide.md).\n", encoding="utf-8")
    small = {key: config[key] for key in ("site_name", "strict", "validation", "use_directory_urls")}
    (tmp_path / "mkdocs.yml").write_text(
        yaml.safe_dump({**small, "docs_dir": str(tmp_path / "docs")}), encoding="utf-8"
    )

    built = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")

    assert built.returncode != 0
    assert "contains a link 'guide.md', but the target is not found" in built.stderr


#: How many code blocks of the page are wider than their box (would scroll sideways).
OVERFLOWING = (
    "[...document.querySelectorAll('.md-typeset pre > code')]"
    ".filter(code => code.scrollWidth > code.clientWidth + 1).length"
)
#: Whether the sidebar's "Home" link is covered by something else where it is drawn.
HOME_COVERED = """(() => {
  const home = [...document.querySelectorAll('.md-nav--primary .md-nav__link')]
    .find(a => a.textContent.trim() === 'Home');
  const box = home.getBoundingClientRect();
  const top = document.elementFromPoint(box.left + 5, box.top + 2);
  return !(top && (home.contains(top) || top.contains(home)));
})()"""


async def test_the_index_and_a_reference_page_open_in_a_browser(site: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "web"))
    try:
        from cdp import chromium_binary, headless_chromium
    finally:
        sys.path.remove(str(ROOT / "tests" / "web"))
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on the PATH: apt-get install chromium (.ci/run does)")

    async with headless_chromium(binary) as page:
        await page.navigate((site / "index.html").as_uri())
        title = await page.wait_for(
            "document.readyState === 'complete' && document.querySelector('article h1')?.textContent",
            what="the index's heading",
        )
        nav = await page.evaluate(
            "[...document.querySelectorAll('.md-nav__link')].map(a => a.textContent.trim())"
        )
        index_wide = await page.evaluate(OVERFLOWING)
        index_shot = await page.screenshot(ARTIFACTS / "docs-index.png")

        await page.navigate((site / "reference" / "api.html").as_uri())
        entry = await page.wait_for(
            "document.readyState === 'complete'"
            " && document.getElementById('agentloop.BaseAgentLoop')?.textContent",
            what="BaseAgentLoop's entry",
        )
        styled = await page.evaluate(
            "getComputedStyle(document.querySelector('.md-header')).position !== 'static'"
        )
        api_wide = await page.evaluate(OVERFLOWING)
        home_hidden = await page.evaluate(HOME_COVERED)
        api_shot = await page.screenshot(ARTIFACTS / "docs-reference-api.png")

    print(f"\nsite screenshots: {index_shot} and {api_shot}")
    assert title.strip().startswith("agentloop")
    assert {"Tutorial", "Public API", "Settings", "GraphQL schema", "Wire contract"} <= set(nav)
    assert "BaseAgentLoop" in entry
    assert styled  # the theme's stylesheet loaded from the site itself, offline
    assert (index_wide, api_wide) == (
        0,
        0,
    )  # no code block scrolls sideways (the make demo block, the error tree)
    assert home_hidden is False  # the sidebar's "Home" is not under its title
