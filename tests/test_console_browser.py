"""The human console in a real headless browser (Debian's chromium, driven by Playwright
pointed at that executable; no browser is downloaded): an operator logs in, approves one
waiting request and denies another, sees the page update without reloading, and what the
agent wrote stays text."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from playwright.async_api import Browser, Page, async_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, scripted_agent
from tests.support.console import A2A_TOKEN, CONSOLE_TOKEN, ConsoleBridge, serve_console
from tests.support.scripted_supervisor import question
from tests.support.wire import answer_text, send

pytestmark = pytest.mark.anyio
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
# Every wait of the browser's (a selector, a navigation), in milliseconds.
BROWSER_WAIT_MS = 20_000
# A real task's whole turn: an adapter starts, asks, waits for the click, ends.
TASK_WAIT_S = 60.0
# How long the attacker's page server gets to start.
PAGE_START_S = 10.0
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


# --- end to end: real tasks wait on real ACP permission requests --------------------------

EXAMPLE_POLICY = Path(__file__).resolve().parents[1] / "examples" / "policy-handed-repo.toml"


def push_step(command: str, call_id: str) -> dict[str, Any]:
    """The agent asks to run `command` (claude's Bash tool call, as captured)."""
    return {
        "op": "permission",
        "tool_call": {
            "toolCallId": call_id,
            "name": "Bash",
            "status": "pending",
            "rawInput": {"command": command, "description": "publish the work"},
            "title": command,
            "kind": "execute",
            "content": [],
            "locations": [],
        },
        "options": [["allow-once", "Yes", "allow_once"], ["reject", "No", "reject_once"]],
    }


async def test_an_operator_decides_for_two_real_tasks_waiting_on_git_push(
    tmp_path: Path, browser: Browser
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [
            [
                push_step("npm test", "toolu_test_1"),  # the policy allows it: no click
                push_step("git push origin main", "toolu_push_1"),
            ]
        ],
    }
    agent = scripted_agent(tmp_path, script, "push")
    async with serve_console(
        tmp_path,
        ACP_AGENT=agent,
        ACP_CWD=str(repo),
        ACP_POLICY=str(EXAMPLE_POLICY),
    ) as bridge:
        headers = {"Authorization": f"Bearer {A2A_TOKEN}"}
        tasks: dict[str, dict[str, Any]] = {}
        async with (
            httpx.AsyncClient(headers=headers, timeout=TASK_WAIT_S) as client,
            anyio.create_task_group() as group,
        ):

            async def run(name: str) -> None:
                tasks[name] = await send(client, bridge.running.rpc_url, f"push it ({name})")

            group.start_soon(run, "first")
            page = await log_in(browser, bridge)
            waiting = await bridge.until_waiting(1)
            # A second conversation's agent asks the same while the first still waits.
            group.start_soon(run, "second")
            waiting = await bridge.until_waiting(2)
            first, second = waiting
            assert first["command"] == second["command"] == "git push origin main"
            assert first["rule"] == second["rule"] == "push-asks"
            assert first["context_id"] != second["context_id"]
            assert first["root"] == str(repo.resolve())
            await page.wait_for_selector(card(first["id"]))
            await page.wait_for_selector(card(second["id"]))
            await page.fill(f"{card(first['id'])} .reason", "reviewed, ship it")
            await page.click(f"{card(first['id'])} .allow")
            await page.fill(f"{card(second['id'])} .reason", "not this one")
            await page.click(f"{card(second['id'])} .deny")
        by_context = {task["contextId"]: task for task in tasks.values()}
        allowed = by_context[first["context_id"]]
        denied = by_context[second["context_id"]]
        assert "permission toolu_push_1: allow-once" in answer_text(allowed)
        assert "permission toolu_push_1: reject" in answer_text(denied)
        # The caller was told why it waited, and why it was refused.
        for task in (allowed, denied):
            lines = [
                "".join(p.get("text", "") for p in m.get("parts", []))
                for m in task.get("history", [])
            ]
            assert any("waiting for the operator's decision on" in line for line in lines), lines
        assert "not this one" in json.dumps(denied)
        # Both decisions are in the ledger with the console as their decider.
        async with httpx.AsyncClient(headers=headers) as client:
            ledger = (await client.get(bridge.url + "/decisions")).json()["decisions"]
        decided = {(e["contextId"], e["decider"], e["verdict"]) for e in ledger}
        assert (first["context_id"], "console", "allow") in decided
        assert (second["context_id"], "console", "deny") in decided
        assert (first["context_id"], "policy", "allow") in decided
        # The console lists the policy's decisions beside its own.
        await page.wait_for_function(
            "[...document.querySelectorAll('#recent tbody tr')]"
            ".some(row => row.textContent.includes('policy: run-tests'))"
        )
        assert "permission toolu_test_1: allow-once" in answer_text(allowed)


async def test_a_page_on_another_origin_cannot_decide_with_the_operators_cookie(
    tmp_path: Path, browser: Browser
) -> None:
    # 127.0.0.1 on another port is another origin but the same site: the SameSite=Strict
    # cookie goes along, so the CSRF token and the Origin check are what refuse it. The
    # attack is the classic one: a text/plain form whose body parses as JSON.
    async with serve_console(tmp_path) as bridge:
        q = question(command="git push --force origin main")
        bridge.park(q)
        await bridge.until_waiting(1)
        page = await log_in(browser, bridge)
        await page.wait_for_selector(card(q.id))
        target = f"{bridge.url}/console/decisions/{q.id}"
        evil = (
            "<!doctype html><form id=f method=post enctype=text/plain "
            f'action="{target}"><input name=\'{{"verdict":"allow","reason":"\' '
            "value='pwned\"}'></form><script>document.getElementById('f').submit()</script>"
        )
        async with serve_page(evil) as evil_url:
            attacked = await page.context.new_page()
            async with attacked.expect_response(target) as caught:
                await attacked.goto(evil_url)
            response = await caught.value
            assert response.status == 403
        assert [w["id"] for w in bridge.console.waiting()] == [q.id]
        assert q.id not in bridge.answers
        # The operator's own click still works.
        await page.click(f"{card(q.id)} .deny")
        assert (await bridge.answer_of(q.id)).verdict == "deny"


@contextlib.asynccontextmanager
async def serve_page(html: str) -> AsyncIterator[str]:
    """`html` served at / by a server of its own on 127.0.0.1 (another origin)."""

    async def page(_request: Request) -> Response:
        return HTMLResponse(html)

    app = Starlette(routes=[Route("/", page)])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        with anyio.fail_after(PAGE_START_S):
            while not server.started:
                if server.should_exit:
                    raise RuntimeError("the page server did not start")
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/"
        finally:
            server.should_exit = True


async def test_a_question_nobody_decides_leaves_the_page_at_its_deadline(
    tmp_path: Path, browser: Browser
) -> None:
    async with serve_console(tmp_path) as bridge:
        page = await log_in(browser, bridge)
        await page.wait_for_selector("#connection.live")
        soon = question(command="git push origin hotfix", deadline=time.time() + 3)
        bridge.park(soon)
        await page.wait_for_selector(card(soon.id))
        answer = await bridge.answer_of(soon.id)
        assert (answer.verdict, answer.reason) == (
            "deny",
            "no operator decided before the deadline",
        )
        await page.wait_for_selector(card(soon.id), state="detached")
        await page.wait_for_function(
            "[...document.querySelectorAll('#recent tbody tr')]"
            ".some(row => row.textContent.includes('expired'))"
        )
