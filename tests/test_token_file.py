"""The token file's principals (issue 13): `NAME TOKEN`, `NAME sha256:HEX`, `NAME scrypt:...`,
the deprecated bare token, a malformed line stopping the start with its number, and
`a2a-acp-bridge token hash`."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.principals import (
    TokenCheck,
    conversation_key,
    hash_scrypt,
    hash_sha256,
    parse_token_lines,
)
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import A2A_HEADERS

pytestmark = pytest.mark.anyio

ALICE = "alice-" + "1" * 26
BOB = "bob-" + "2" * 28
CAROL = "carol-" + "3" * 26
LEGACY = "legacy-" + "4" * 25
CLI_TIMEOUT_S = 30
VARIABLE = "A2A_TOKEN_FILE"


def test_each_form_names_its_principal_and_only_its_token_matches() -> None:
    entries = parse_token_lines(
        VARIABLE,
        [
            "# a comment",
            "",
            f"alice {ALICE}",
            f"bob {hash_sha256(BOB)}",
            f"carol {hash_scrypt(CAROL, n=2**10)}",
            f"alice {hash_sha256('alice-rotated-' + '5' * 20)}",  # rotation: two tokens, one name
        ],
    )
    check = TokenCheck(entries)
    assert [e.principal for e in entries] == ["alice", "bob", "carol", "alice"]
    assert check.principal_of(ALICE) == "alice"
    assert check.principal_of("alice-rotated-" + "5" * 20) == "alice"
    assert check.principal_of(BOB) == "bob"
    assert check.principal_of(CAROL) == "carol"
    assert check.principal_of(CAROL) == "carol"  # the second time from the remembered digest
    for wrong in (ALICE + "x", BOB[:-1], CAROL.upper(), hash_sha256(BOB), "bob"):
        assert check.principal_of(wrong) is None, wrong
    # Only a token given in clear can be presented by `send` and `card`.
    assert [e.plain for e in entries] == [ALICE, None, None, None]
    assert ALICE not in repr(entries)
    assert "sha256" not in repr(entries)


def test_bare_tokens_are_named_by_their_position() -> None:
    entries = parse_token_lines(VARIABLE, [LEGACY, f"alice {ALICE}", BOB])
    assert [(e.principal, e.positional) for e in entries] == [
        ("token-1", True),
        ("alice", False),
        ("token-3", True),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (f"alice {ALICE} extra", "two fields"),
        ("alice short", "the token is 5 characters"),
        ("alice sha256:abc", "64 hex digits"),
        ("alice scrypt:1024:8:1:nope", r"scrypt:N:R:P:SALT:HASH"),
        ("alice scrypt:1000:8:1:c2FsdHNhbHQ=:aGFzaGhhc2hoYXNoaGFzaA==", "power of two"),
        (f"al!ce {ALICE}", "is not a principal name"),
        (f"-alice {ALICE}", "is not a principal name"),
    ],
)
def test_a_malformed_line_is_an_error_naming_its_number(line: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        parse_token_lines(VARIABLE, ["# first", f"bob {BOB}", line])
    assert str(caught.value).startswith("A2A_TOKEN_FILE line 3: ")
    assert ALICE not in str(caught.value)


def test_one_token_for_two_principals_is_refused() -> None:
    with pytest.raises(ConfigError, match="one token is listed for two principals"):
        parse_token_lines(VARIABLE, [f"alice {ALICE}", f"bob {hash_sha256(ALICE)}"])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("default", "alice\x1fctx"), ("alice", "ctx")),
        (("default", "\x1fctx"), ("alice", "ctx")),
        (("default", "default\x1fctx"), ("default", "ctx")),
        (("alice", "ctx"), ("bob", "ctx")),
    ],
)
def test_two_different_principal_and_context_pairs_never_share_a_key(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    assert conversation_key(*first) != conversation_key(*second)


NAMES = st.text(st.characters(exclude_categories=["Cc"]), min_size=1, max_size=8) | st.just(
    "default"
)
CONTEXTS = st.text(st.sampled_from("ab\x1fd-"), max_size=8) | st.text(max_size=8)


@given(NAMES, CONTEXTS, NAMES, CONTEXTS)
def test_the_key_is_one_to_one_for_any_names_and_context_ids(
    p1: str, c1: str, p2: str, c2: str
) -> None:
    if (p1, c1) != (p2, c2):
        assert conversation_key(p1, c1) != conversation_key(p2, c2)


def test_the_default_principal_keeps_its_context_ids_as_keys() -> None:
    assert conversation_key("default", "ctx") == "ctx"
    assert conversation_key("default", "\x1b]0;ctx") == "\x1b]0;ctx"


def _cli(args: list[str], stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_", "ACP_"))}
    return subprocess.run(
        [sys.executable, "-m", "a2a_acp_bridge", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean,
        timeout=CLI_TIMEOUT_S,
    )


async def test_token_hash_prints_a_line_the_bridge_accepts_and_never_echoes_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hashed = _cli(["token", "hash"], BOB + "\n", tmp_path)
    slow = _cli(["token", "hash", "--scrypt"], CAROL + "\n", tmp_path)
    refused = _cli(["token", "hash"], "short\n", tmp_path)
    assert hashed.returncode == 0, hashed.stderr
    assert slow.returncode == 0, slow.stderr
    assert hashed.stdout.startswith("sha256:")
    assert BOB not in hashed.stdout
    assert slow.stdout.startswith("scrypt:32768:8:1:")
    assert CAROL not in slow.stdout
    assert refused.returncode == 2
    assert "short" not in refused.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{LEGACY}\nbob {hashed.stdout.strip()}\ncarol {slow.stdout.strip()}\n")
    caplog.set_level(logging.WARNING)
    settings = make_settings(tmp_path, {"A2A_TOKEN_FILE": str(tokens)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        answers = [
            await client.post(
                bridge.rpc_url, json=body, headers={**A2A_HEADERS, "Authorization": f"Bearer {t}"}
            )
            for t in (BOB, CAROL, LEGACY, CAROL + "x")
        ]
    assert [a.status_code for a in answers] == [200, 200, 200, 401]
    warnings = [r for r in caplog.records if "bare tokens" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].__dict__["principals"] == ["token-1"]
    assert LEGACY not in str(warnings[0].__dict__)


def test_a_malformed_token_file_stops_serve_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text(f"alice {ALICE}\n\nbob {BOB} third-field\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_", "ACP_", "HOST"))}
    result = subprocess.run(
        [sys.executable, "-m", "a2a_acp_bridge", "serve", "--port", "0"],
        cwd=tmp_path,
        env={**clean, "A2A_TOKEN_FILE": "tokens"},
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "a2a-acp-bridge: A2A_TOKEN_FILE line 3: a line is NAME TOKEN, NAME sha256:HEX or "
        "NAME scrypt:... (two fields)"
    )
    assert BOB not in result.stderr
