"""The human console in a real headless browser (Debian's chromium, driven by Playwright
pointed at that executable; no browser is downloaded): an operator logs in, approves one
waiting request and denies another, sees the page update without reloading, and what the
agent wrote stays text."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.support.console import CONSOLE_TOKEN, ConsoleBridge, serve_console
from tests.support.supervisor import question

pytestmark = pytest.mark.anyio
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
# Every wait of the browser's (a selector, a navigation), in milliseconds.
BROWSER_WAIT_MS = 20_000
HOSTILE_COMMAND = (
    '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    "rm -rf / && echo '</pre><b id=bold>x</b>'"
)
HOSTILE_DIFF = '--- a/x\n+++ b/x\n+<iframe src="javascript:window.pwned=3"></iframe>\n'


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        pytest.skip(f"no chromium at {CHROMIUM} (scripts/test installs Debian's chromium)")
    async with async_playwright() as playwright:
        # --no-sandbox: the tests may run as root, where chromium's own sandbox cannot start.
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def log_in(browser: Browser, bridge: ConsoleBridge, token: str = CONSOLE_TOKEN) -> Page:
    page = await (await browser.new_context()).new_page()
    page.set_default_timeout(BROWSER_WAIT_MS)
    response = await page.goto(bridge.url + "/console")
    assert response is not None
    assert response.status == 401
    await page.fill("#token", token)
    async with page.expect_navigation():
        await page.click("#login")
    return page


def card(question_id: str) -> str:
    return f'article[data-question="{question_id}"]'


async def test_an_operator_approves_one_request_and_denies_another(
    tmp_path: Path, browser: Browser
) -> None:
    async with serve_console(tmp_path) as bridge:
        publish = question(command="npm publish", title="npm publish", rule="ask-publish")
        hostile = question(command=HOSTILE_COMMAND, title=HOSTILE_COMMAND, diff=HOSTILE_DIFF)
        bridge.park(publish)
        bridge.park(hostile)
        await bridge.until_waiting(2)
        page = await log_in(browser, bridge)
        await page.wait_for_selector(card(publish.id))
        await page.wait_for_selector(card(hostile.id))

        # What the agent wrote is shown as text, never run or parsed as markup.
        shown = await page.text_content(f"{card(hostile.id)} .command")
        assert shown == HOSTILE_COMMAND
        assert await page.text_content(f"{card(hostile.id)} .title") == HOSTILE_COMMAND
        assert await page.text_content(f"{card(hostile.id)} .diff") == HOSTILE_DIFF
        assert await page.evaluate("window.pwned") is None
        assert await page.locator("#bold").count() == 0
        assert await page.locator(f"{card(hostile.id)} img, iframe").count() == 0
        assert await page.text_content(f"{card(publish.id)} .rule") == (
            "ask-publish: a push leaves the machine"
        )
        countdown = await page.text_content(f"{card(publish.id)} .countdown")
        assert countdown is not None
        assert re.fullmatch(r"\d+ s left", countdown)

        await page.fill(f"{card(publish.id)} .reason", "release day")
        await page.click(f"{card(publish.id)} .allow")
        allowed = await bridge.answer_of(publish.id)
        await page.fill(f"{card(hostile.id)} .reason", "that is an attack")
        await page.click(f"{card(hostile.id)} .deny")
        denied = await bridge.answer_of(hostile.id)
        assert (allowed.verdict, allowed.reason, allowed.decider) == (
            "allow",
            "release day",
            "console",
        )
        assert (denied.verdict, denied.reason, denied.decider) == (
            "deny",
            "that is an attack",
            "console",
        )

        # The page follows without a reload: both leave the waiting list for the recent one.
        await page.wait_for_selector(card(publish.id), state="detached")
        await page.wait_for_selector(card(hostile.id), state="detached")
        await page.wait_for_function("document.querySelectorAll('#recent tbody tr').length === 2")
        rows = await page.locator("#recent tbody tr").all_inner_texts()
        assert "allow" in rows[1]
        assert "release day" in rows[1]
        assert "deny" in rows[0]
        assert "<script>" in rows[0]  # as text
        assert await page.evaluate("window.pwned") is None
        assert await page.is_visible("#nothing-waiting")


async def test_a_question_asked_while_the_page_is_open_appears_and_leaves_live(
    tmp_path: Path, browser: Browser
) -> None:
    async with serve_console(tmp_path) as bridge:
        page = await log_in(browser, bridge)
        await page.wait_for_selector("#connection.live")
        assert await page.is_visible("#nothing-waiting")
        later = question(command="git push --force", deadline=time.time() + 600)
        bridge.park(later)
        await page.wait_for_selector(card(later.id))
        assert await page.text_content(f"{card(later.id)} .command") == "git push --force"
        # Decided elsewhere (another operator, with the bearer header): the card goes.
        async with httpx.AsyncClient(base_url=bridge.url) as client:
            response = await client.post(
                f"/console/decisions/{later.id}",
                json={"verdict": "deny", "reason": "not forced"},
                headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"},
            )
            assert response.status_code == 200
        await page.wait_for_selector(card(later.id), state="detached")
        assert (await bridge.answer_of(later.id)).reason == "not forced"


async def test_a_wrong_token_in_the_form_opens_nothing_and_the_cookie_is_out_of_scripts_reach(
    tmp_path: Path, browser: Browser
) -> None:
    async with serve_console(tmp_path) as bridge:
        page = await log_in(browser, bridge, token="wrong-" + "w" * 30)
        assert await page.text_content("#message") == "The token was not accepted."
        assert await page.context.cookies() == []
        page = await log_in(browser, bridge)
        await page.wait_for_selector("#connection.live")
        cookies = await page.context.cookies()
        assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [
            ("bridge_console", True, "Strict")
        ]
        assert await page.evaluate("document.cookie") == ""
        assert CONSOLE_TOKEN not in page.url
