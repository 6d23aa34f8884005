"""A real Chromium (the system package) driven by Playwright, against a real runtime.

No browser download: Playwright launches ``/usr/bin/chromium`` (``apt-get install
chromium``).  Without it, or without the ``playwright`` package, every test here
is skipped with the reason.  Each conversation is its own browser context (its
own cookies, so its own web chat session); the browser itself starts with a
fresh temporary profile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import runtime  # noqa: F401  (re-exported fixture)
from tests.integration.web.webtools import wait_up

CHROMIUM = os.environ.get("PARLEY_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _skip_reason() -> str | None:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"{CHROMIUM} not found (install it: apt-get install -y chromium)"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    return None


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    reason = _skip_reason()
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
def served(runtime: Callable[..., Any]) -> Callable[..., Any]:  # noqa: F811
    """``async with served(llm=..) as rt``: the whole service, web chat on 127.0.0.1:rt.port."""

    @contextlib.asynccontextmanager
    async def make(**kw: Any) -> AsyncIterator[Any]:
        async with runtime("all", serve_web=True, **kw) as rt:
            await wait_up(rt.port)
            try:
                yield rt
            finally:
                # Open pages hold event streams; end them so the server stops at once.
                rt.channels["web"].close_streams()

    return make


@pytest.fixture
async def open_chat(browser: Any) -> AsyncIterator[Callable[..., Any]]:
    """``page = await open_chat(base_url, width=..)``: a new conversation in its own context.

    Console errors and CSP violations are collected on ``page.problems``.
    """
    contexts: list[Any] = []

    async def make(base: str, *, width: int = 1000, height: int = 760) -> Any:
        ctx = await browser.new_context(
            base_url=base, viewport={"width": width, "height": height}, locale="en-US"
        )
        contexts.append(ctx)
        page = await ctx.new_page()
        page.set_default_timeout(10_000)
        problems: list[str] = []
        page.problems = problems
        page.on(
            "console",
            lambda m: problems.append(m.text) if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        await page.goto("/")
        await page.wait_for_selector("#status:text-is('connected')")
        return page

    yield make
    for ctx in contexts:
        with contextlib.suppress(Exception):
            await ctx.close()
