"""A headless Chromium driven over the Chrome DevTools Protocol (a WebSocket), for the viewer test.

Debian's ``chromium`` (``apt-get install chromium``); nothing is downloaded.
:func:`headless_chromium` starts it on a private profile with a free debugging
port and yields a :class:`Page` connected to its first tab.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import websockets


def chromium_binary() -> str | None:
    """Debian's ``chromium`` (or a ``chromium-browser`` / ``google-chrome``) on the PATH."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    """One tab: navigate, evaluate JavaScript, take screenshots."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(await asyncio.wait_for(self.socket.recv(), 30))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    async def navigate(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, *, timeout: float = 30.0, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting in the page for {what or expression}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> Path:
        data = await self.call("Page.captureScreenshot", format="png")
        await asyncio.to_thread(_write, path, base64.b64decode(data["data"]))
        return path


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _port(profile: str) -> int | None:
    """The debugging port Chromium wrote to its profile, once it has."""
    port_file = Path(profile) / "DevToolsActivePort"
    text = port_file.read_text() if port_file.exists() else ""
    return int(text.split()[0]) if text.strip() else None


#: Tries to start Chromium: on a loaded host its first start now and then exits before it opens
#: its debugging port (seen once in CI); another start on a fresh profile opens it.
STARTS = 3


async def _start_chromium(
    binary: str, profile: str, log: Path, width: int, height: int
) -> tuple[asyncio.subprocess.Process, int | None]:
    """Chromium on ``profile`` (its stderr in ``log``) and its debugging port, or ``None`` when it
    exited without one or did not write it within 60 s."""
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    deadline = time.monotonic() + 60
    while (port := await asyncio.to_thread(_port, profile)) is None:
        if process.returncode is not None or time.monotonic() > deadline:
            return process, None
        await asyncio.sleep(0.05)
    return process, port


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


@asynccontextmanager
async def headless_chromium(binary: str, *, width: int = 1400, height: int = 1000) -> AsyncIterator[Page]:
    """A headless Chromium on a private profile; yields its first tab."""
    with tempfile.TemporaryDirectory(prefix="agentloop-chromium-", ignore_cleanup_errors=True) as folder:
        for attempt in range(1, STARTS + 1):
            profile, log = str(Path(folder) / f"profile-{attempt}"), Path(folder) / f"stderr-{attempt}.log"
            process, port = await _start_chromium(binary, profile, log, width, height)
            if port is not None:
                break
            await _stop(process)
        else:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(
                f"chromium did not open its debugging port in {STARTS} starts "
                f"(the last exited with {process.returncode}); its stderr ends:\n{tail}"
            )
        try:
            async with httpx.AsyncClient() as client:
                targets = (await client.get(f"http://127.0.0.1:{port}/json/list")).json()
            page_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with websockets.connect(page_url, max_size=64 * 2**20) as socket:
                page = Page(socket)
                await page.call("Page.enable")
                await page.call("Runtime.enable")
                yield page
        finally:
            await _stop(process)
