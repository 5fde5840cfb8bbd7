"""The human console over real HTTP: who may open it, how a click decides, what a late or
forged click gets, and that what the agent wrote never becomes markup."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from a2a_acp_bridge.console import ConsoleSupervisor
from a2a_acp_bridge.console_web import (
    COOKIE,
    GUESS_WINDOW_S,
    GUESSERS_KEPT,
    GUESSES,
    ConsoleAuth,
    GuessLimit,
)
from tests.support.console import A2A_TOKEN, CONSOLE_TOKEN, CONSOLE_WAIT_S, serve_console
from tests.support.scripted_supervisor import question

pytestmark = pytest.mark.anyio
CONSOLE_BEARER = {"Authorization": f"Bearer {CONSOLE_TOKEN}"}


async def login(client: httpx.AsyncClient, token: str = CONSOLE_TOKEN) -> httpx.Response:
    return await client.post(
        "/console/login",
        content=f"token={token}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )


def csrf_of(page: str) -> str:
    marker = '<meta name="csrf-token" content="'
    start = page.index(marker) + len(marker)
    return page[start : page.index('"', start)]


async def logged_in(client: httpx.AsyncClient) -> str:
    """Log `client` in through the form; the page's CSRF token."""
    response = await login(client)
    assert response.status_code == 303
    page = await client.get("/console")
    assert page.status_code == 200
    return csrf_of(page.text)


async def test_without_a_session_the_console_is_a_login_form_and_its_data_401(
    tmp_path: Path,
) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        page = await c.get("/console")
        assert page.status_code == 401
        assert '<form method="post" action="/console/login"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        for path in ("/console/state", "/console/events"):
            assert (await c.get(path)).status_code == 401
        refused = await c.post("/console/decisions/" + "0" * 32, json={"verdict": "allow"})
        assert refused.status_code == 401


async def test_an_a2a_token_does_not_open_the_console_nor_the_console_token_a2a(
    tmp_path: Path,
) -> None:
    # The A2A caller holds A2A_TOKEN: with it, it would approve its own requests.
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        caller = {"Authorization": f"Bearer {A2A_TOKEN}"}
        assert (await c.get("/console/state", headers=caller)).status_code == 401
        assert (await login(c, A2A_TOKEN)).status_code == 401
        assert COOKIE not in c.cookies
        assert (await c.get("/console/state", headers=CONSOLE_BEARER)).status_code == 200
        assert (await c.get("/metrics", headers=CONSOLE_BEARER)).status_code == 401
        assert (await c.get("/metrics", headers=caller)).status_code == 200


async def test_a_wrong_token_gets_the_form_again_and_no_cookie(tmp_path: Path) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        response = await login(c, "wrong-token-" + "x" * 30)
        assert response.status_code == 401
        assert "The token was not accepted." in response.text
        assert "set-cookie" not in response.headers
        assert "wrong-token" not in response.text


async def test_the_session_cookie_is_httponly_strict_and_the_token_is_never_in_a_url(
    tmp_path: Path,
) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        response = await login(c)
        assert response.status_code == 303
        assert response.headers["location"] == "/console"
        cookie = response.headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert "path=/console" in cookie
        assert CONSOLE_TOKEN.lower() not in cookie
        page = await c.get("/console")
        assert page.status_code == 200
        assert CONSOLE_TOKEN not in page.text


async def test_a_click_with_the_csrf_token_decides_and_the_asker_gets_it(tmp_path: Path) -> None:
    async with serve_console(tmp_path) as bridge:
        q = question()
        bridge.park(q)
        await bridge.until_waiting(1)
        async with httpx.AsyncClient(base_url=bridge.url) as client:
            csrf = await logged_in(client)
            state = (await client.get("/console/state")).json()
            assert [w["id"] for w in state["waiting"]] == [q.id]
            shown = state["waiting"][0]
            assert (shown["task_id"], shown["context_id"], shown["kind"]) == (
                "task-1",
                "ctx-1",
                "execute",
            )
            assert shown["command"] == "git push origin main"
            assert shown["rule"] == "ask-git-push"
            assert shown["deadline"] == q.deadline
            response = await client.post(
                f"/console/decisions/{q.id}",
                json={"verdict": "allow", "reason": "release day"},
                headers={"X-CSRF-Token": csrf},
            )
            assert response.status_code == 200, response.text
            answer = await bridge.answer_of(q.id)
            assert (answer.verdict, answer.reason, answer.decider) == (
                "allow",
                "release day",
                "console",
            )
            state = (await client.get("/console/state")).json()
            assert state["waiting"] == []
            assert state["recent"][0]["id"] == q.id
            assert state["recent"][0]["verdict"] == "allow"
            assert state["recent"][0]["how"] == "decided"


async def test_a_cookie_without_the_right_csrf_token_or_from_another_origin_is_refused(
    tmp_path: Path,
) -> None:
    async with serve_console(tmp_path) as bridge:
        q = question()
        bridge.park(q)
        await bridge.until_waiting(1)
        async with httpx.AsyncClient(base_url=bridge.url) as client:
            csrf = await logged_in(client)
            url = f"/console/decisions/{q.id}"
            body = {"verdict": "allow", "reason": "forged"}
            for headers in (
                {},
                {"X-CSRF-Token": "not-" + csrf},
                {"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
            ):
                response = await client.post(url, json=body, headers=headers)
                assert response.status_code == 403, headers
                assert response.json()["error"] == "forbidden"
            # A plain form post (what a cross-site page can send) is refused too.
            form = await client.post(
                url,
                content="verdict=allow",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert form.status_code == 403
            assert bridge.console.waiting()[0]["id"] == q.id
            assert q.id not in bridge.answers


async def test_the_bearer_header_decides_without_a_cookie(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="a2a_acp_bridge.decision")
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        q = question()
        bridge.park(q)
        await bridge.until_waiting(1)
        response = await c.post(
            f"/console/decisions/{q.id}", json={"verdict": "deny"}, headers=CONSOLE_BEARER
        )
        assert response.status_code == 200
        answer = await bridge.answer_of(q.id)
        assert (answer.verdict, answer.reason) == ("deny", "the operator denied it")
    # One log line for the decision: who asked, who clicked, never the console token.
    [line] = [r for r in caplog.records if r.getMessage() == "supervisor answered"]
    assert vars(line)["principal"] == "default"
    assert vars(line)["by"] == "127.0.0.1"
    assert vars(line)["verdict"] == "deny"
    assert all(CONSOLE_TOKEN not in str(value) for value in vars(line).values())


async def test_an_unknown_id_is_404_and_a_second_or_late_click_409(tmp_path: Path) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        unknown = await c.post(
            "/console/decisions/" + "f" * 32, json={"verdict": "allow"}, headers=CONSOLE_BEARER
        )
        assert unknown.status_code == 404
        q = question()
        bridge.park(q)
        await bridge.until_waiting(1)
        url = f"/console/decisions/{q.id}"
        first = await c.post(url, json={"verdict": "deny"}, headers=CONSOLE_BEARER)
        assert first.status_code == 200
        await bridge.answer_of(q.id)
        again = await c.post(url, json={"verdict": "allow"}, headers=CONSOLE_BEARER)
        assert again.status_code == 409
        assert "already decided, expired or cancelled" in again.json()["message"]
        assert bridge.answers[q.id].verdict == "deny"
        # A question whose deadline passed: a deny, and a click after it is too late.
        late = question(deadline=time.time() + 0.5)
        bridge.park(late)
        answer = await bridge.answer_of(late.id)
        assert (answer.verdict, answer.reason) == (
            "deny",
            "no operator decided before the deadline",
        )
        too_late = await c.post(
            f"/console/decisions/{late.id}", json={"verdict": "allow"}, headers=CONSOLE_BEARER
        )
        assert too_late.status_code == 409
        recent = (await c.get("/console/state", headers=CONSOLE_BEARER)).json()["recent"]
        assert [(r["id"], r["how"]) for r in recent[:2]] == [
            (late.id, "expired"),
            (q.id, "decided"),
        ]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"verdict": "maybe"}', id="no-such-verdict"),
        pytest.param(b'{"verdict": "allow", "reason": 7}', id="reason-not-text"),
        pytest.param(b'["allow"]', id="a-list"),
        pytest.param(b'{"optionId": "allow_always"}', id="an-option-id"),
    ],
)
async def test_a_malformed_decision_is_400_and_decides_nothing(tmp_path: Path, body: bytes) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        q = question()
        bridge.park(q)
        await bridge.until_waiting(1)
        response = await c.post(
            f"/console/decisions/{q.id}",
            content=body,
            headers={**CONSOLE_BEARER, "Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert "Traceback" not in response.text
        assert bridge.console.waiting()[0]["id"] == q.id


async def test_the_events_stream_sends_the_state_on_every_change(tmp_path: Path) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        async with c.stream("GET", "/console/events", headers=CONSOLE_BEARER) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            states = []
            q = question()
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                states.append(json.loads(line[5:]))
                if len(states) == 1:
                    assert states[0]["waiting"] == []
                    bridge.park(q)
                elif any(w["id"] == q.id for w in states[-1]["waiting"]):
                    break
        assert states[-1]["waiting"][0]["command"] == "git push origin main"


async def test_a_cancelled_ask_leaves_the_console_at_once(tmp_path: Path) -> None:
    import anyio

    console = ConsoleSupervisor()
    q = question()
    with anyio.move_on_after(0.2):
        await console.ask(q)
    assert console.waiting() == []
    assert console.recent()[0]["how"] == "cancelled"
    assert console.decide(q.id, "allow", "") == "gone"


async def test_the_console_is_not_served_when_no_supervisor_names_it(tmp_path: Path) -> None:
    from tests.support.server import make_settings, serve_bridge

    settings = make_settings(tmp_path, {"ACP_CONSOLE_TOKEN": CONSOLE_TOKEN})
    async with serve_bridge(settings) as running, httpx.AsyncClient(base_url=running.url) as c:
        for path in ("/console", "/console/state"):
            response = await c.get(path)
            # Whatever the SDK's routes make of the path, it is no console.
            assert response.status_code in (307, 404), path
            assert "console/login" not in response.text
        decide = await c.post("/console/decisions/" + "0" * 32, json={"verdict": "allow"})
        assert decide.status_code in (404, 405, 415)


async def test_a_wait_the_chains_deadline_cancels_counts_as_expired_not_cancelled() -> None:
    import anyio

    q = question()
    now = [time.time()]
    outcomes: list[tuple[str, str | None]] = []
    console = ConsoleSupervisor(
        clock=lambda: now[0],
        on_outcome=lambda verdict, _s, cause: outcomes.append((verdict, cause)),
    )
    async with anyio.create_task_group() as group:
        group.start_soon(console.ask, q)
        with anyio.fail_after(CONSOLE_WAIT_S):
            while not console.waiting():
                await console.changed(console.version)
        now[0] = q.deadline  # the chain's fail_after fires at the question's deadline
        group.cancel_scope.cancel()
    assert console.recent()[0]["how"] == "expired"
    assert outcomes == [("deny", "timeout")]


async def test_an_oversized_login_form_is_refused_unread(tmp_path: Path) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        response = await c.post(
            "/console/login",
            content="token=" + "x" * 10_000,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert response.status_code == 400
        assert "set-cookie" not in response.headers

        async def chunks() -> AsyncIterator[bytes]:
            # No Content-Length: the form is read only until it is too large.
            yield b"token="
            for _ in range(10):
                yield b"x" * 1000

        chunked = await c.post(
            "/console/login",
            content=chunks(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert chunked.status_code == 400
        assert "set-cookie" not in chunked.headers


async def test_logging_out_ends_the_session(tmp_path: Path) -> None:
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        await logged_in(c)
        stolen = c.cookies[COOKIE]
        assert (await c.get("/console/state")).status_code == 200
        out = await c.post("/console/logout")
        assert out.status_code == 303
        assert (await c.get("/console/state")).status_code == 401
        # The old cookie, replayed, opens nothing: the session is gone on the server.
        async with httpx.AsyncClient(base_url=bridge.url, cookies={COOKIE: stolen}) as thief:
            assert (await thief.get("/console/state")).status_code == 401


async def test_a_client_guessing_the_token_is_refused_429_even_with_the_right_one(
    tmp_path: Path,
) -> None:
    async with (
        serve_console(tmp_path) as bridge,
        httpx.AsyncClient(base_url=bridge.url) as browser,
        httpx.AsyncClient(base_url=bridge.url) as guesser,
    ):
        await logged_in(browser)  # an operator's session opened before the guessing
        for n in range(GUESSES - 1):
            assert (await login(guesser, f"guess-{n}-" + "x" * 30)).status_code == 401
        # The last guess the window allows, by the header this time: the same count.
        wrong = {"Authorization": "Bearer guess-by-header-" + "x" * 30}
        refused = await guesser.get("/console/state", headers=wrong)
        assert refused.status_code == 429
        assert 0 < int(refused.headers["retry-after"]) <= GUESS_WINDOW_S
        # Now the token itself is not even looked at, by the form or the header.
        page = await login(guesser)
        assert page.status_code == 429
        assert "Too many wrong tokens" in page.text
        assert "set-cookie" not in page.headers
        assert (await guesser.get("/console/state", headers=CONSOLE_BEARER)).status_code == 429
        decided = await guesser.post(
            "/console/decisions/" + "0" * 32, json={"verdict": "allow"}, headers=CONSOLE_BEARER
        )
        assert decided.status_code == 429
        # The session opened before goes on: only offers of the token are refused.
        assert (await browser.get("/console/state")).status_code == 200


def test_the_guess_limit_forgets_misses_after_its_window_and_a_success_clears_them() -> None:
    now = [1000.0]
    limit = GuessLimit(guesses=3, window_s=60.0, clock=lambda: now[0])
    auth = ConsoleAuth(CONSOLE_TOKEN, secure_cookie=False, guesses=limit)
    for _ in range(3):
        assert not auth.token_ok("wrong", "10.0.0.1")
    assert limit.wait_s("10.0.0.1") == 60.0
    assert limit.wait_s("10.0.0.2") == 0.0  # another address is not held back
    assert not auth.token_ok(CONSOLE_TOKEN, "10.0.0.1")  # refused unread while waiting
    now[0] += 30.0
    assert limit.wait_s("10.0.0.1") == 30.0
    now[0] += 30.0
    assert limit.wait_s("10.0.0.1") == 0.0  # the oldest miss left the window
    assert auth.token_ok(CONSOLE_TOKEN, "10.0.0.1")
    for _ in range(2):
        assert not auth.token_ok("wrong", "10.0.0.1")
    assert auth.token_ok(CONSOLE_TOKEN, "10.0.0.1")  # a success clears the misses
    assert not auth.token_ok("wrong", "10.0.0.1")
    assert limit.wait_s("10.0.0.1") == 0.0


def test_the_guess_limit_remembers_a_bounded_number_of_addresses() -> None:
    limit = GuessLimit(guesses=1, window_s=60.0)
    for n in range(GUESSERS_KEPT + 10):
        limit.missed(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}")
    assert len(limit._misses) == GUESSERS_KEPT
    assert limit.wait_s("10.0.0.0") == 0.0  # the quietest was forgotten
    assert limit.wait_s(f"10.0.{(GUESSERS_KEPT + 9) // 256}.{(GUESSERS_KEPT + 9) % 256}") > 0


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/console/rest/tasks"),
        ("POST", "/console/rest/message:send"),
        ("POST", "/console/message:send"),
        ("GET", "/console/tasks"),
        ("PUT", "/console/state"),
        ("GET", "/console/decisions/x/../../rest/tasks"),
    ],
)
async def test_no_path_under_the_console_reaches_the_a2a_api_without_a_token(
    tmp_path: Path, method: str, path: str
) -> None:
    # The guard leaves /console/... to the console's own checks; the SDK's per-tenant REST
    # mount (/{tenant}/...) would otherwise serve tenant "console" to anyone, with no token.
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "write x.txt: y"}]}
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        response = await c.request(
            method,
            path,
            json={"message": message},
            headers={"A2A-Version": "1.0", "Content-Type": "text/plain"},
        )
        assert response.status_code in (401, 404, 405), response.text
        listed = await c.post(
            "/",
            json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
            headers={"A2A-Version": "1.0", "Authorization": f"Bearer {A2A_TOKEN}"},
        )
        assert listed.json()["result"].get("tasks", []) == []  # nothing ran


async def test_a_browser_s_events_stream_ends_with_its_session(tmp_path: Path) -> None:
    # After a logout the questions (commands, diffs) must no longer reach that browser.
    async with serve_console(tmp_path) as bridge, httpx.AsyncClient(base_url=bridge.url) as c:
        await logged_in(c)
        seen = 0
        with anyio.fail_after(CONSOLE_WAIT_S):
            async with c.stream("GET", "/console/events") as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data:"):
                        seen += 1
                        out = await c.post("/console/logout")
                        assert out.status_code == 303
                        bridge.park(question())  # a change the stream would have sent
        assert seen == 1  # the stream ended by itself, the new question never sent
