"""JWT bearer tokens (issue 13) over real HTTP: what is refused with 401 and why, the keys
from a JWKS file and from a JWKS served on 127.0.0.1 (rotated: a new kid is fetched; a
flood of unknown kids is not), and the card's declaration of the scheme."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.jwt_bearer import REFRESH_INTERVAL_S, allowed_algorithms
from a2a_acp_bridge.principals import hash_scrypt
from tests.support import idp
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import A2A_HEADERS, user_message

pytestmark = pytest.mark.anyio

CARD = "/.well-known/agent-card.json"
CLIENT_TIMEOUT_S = 30.0


def jwt_env(tmp_path: Path, document: dict[str, Any], **extra: str) -> dict[str, str]:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(document))
    return {
        "A2A_JWT_ISSUER": idp.ISSUER,
        "A2A_JWT_AUDIENCE": idp.AUDIENCE,
        "A2A_JWT_JWKS_FILE": str(path),
        **extra,
    }


def served_jwks_env(url: str) -> dict[str, str]:
    return {
        "A2A_JWT_ISSUER": idp.ISSUER,
        "A2A_JWT_AUDIENCE": idp.AUDIENCE,
        "A2A_JWT_JWKS_URL": url,
    }


async def list_tasks(client: httpx.AsyncClient, url: str, token: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    return await client.post(
        url, json=body, headers={**A2A_HEADERS, "Authorization": f"Bearer {token}"}
    )


def _hs256(secret: bytes, kid: str) -> str:
    return jwt.encode(idp.claims("mallory"), secret, algorithm="HS256", headers={"kid": kid})


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["sub"] = "alice"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


async def test_a_token_that_fails_any_check_is_refused_with_401(tmp_path: Path) -> None:
    key = idp.rsa_key("rsa-1")
    other = idp.rsa_key("rsa-1")  # the same kid, another key: a forger's
    secret = b"s" * 32
    document = idp.jwks(key)
    # An HMAC secret in the set is never used: only asymmetric keys verify.
    document["keys"].append(
        {"kty": "oct", "kid": "oct-1", "k": base64.urlsafe_b64encode(secret).decode()}
    )
    env = jwt_env(tmp_path, document, A2A_JWT_REQUIRED_SCOPE="a2a")
    now = int(time.time())
    refused = {
        "expired": idp.token(key, "bob", exp=now - 3600, nbf=now - 7200, iat=now - 7200),
        "not yet valid": idp.token(key, "bob", nbf=now + 3600),
        "wrong audience": idp.token(key, "bob", aud="another-service"),
        "wrong issuer": idp.token(key, "bob", iss="https://evil.example.test"),
        "no expiry": idp.token(key, "bob", exp=None),
        "alg none": idp.unsigned_token("rsa-1", "bob"),
        "HS256 with the RSA public key": idp.confused_token(key, "bob"),
        "HS256 with the set's oct key": _hs256(secret, "oct-1"),
        "signed by another key": idp.token(other, "bob"),
        "tampered": _tampered(idp.token(key, "bob")),
        "unknown kid": idp.token(idp.rsa_key("elsewhere"), "bob"),
        "without the scope": idp.token(key, "bob", scope="openid"),
        "no subject": idp.token(key, "", scope="a2a"),
        "not a JWT": "not.a-jwt.at-all",
    }
    async with (
        serve_bridge(make_settings(tmp_path, env)) as bridge,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        answers = {name: await list_tasks(client, bridge.rpc_url, t) for name, t in refused.items()}
        accepted = await list_tasks(client, bridge.rpc_url, idp.token(key, "bob"))
        with_scp = await list_tasks(
            client, bridge.rpc_url, idp.token(key, "bob", scope=None, scp=["a2a", "x"])
        )
    for name, response in answers.items():
        assert response.status_code == 401, name
        assert response.headers["www-authenticate"].startswith("Bearer "), name
        assert "mallory" not in response.text
    assert accepted.status_code == 200, accepted.text
    assert with_scp.status_code == 200, with_scp.text
    assert "expired" in answers["expired"].json()["message"]
    assert "audience" in answers["wrong audience"].json()["message"]


async def test_an_ec_key_and_another_principal_claim_work(tmp_path: Path) -> None:
    key = idp.ec_key("ec-1")
    env = jwt_env(tmp_path, idp.jwks(key), A2A_JWT_PRINCIPAL_CLAIM="email")
    async with (
        serve_bridge(make_settings(tmp_path, env)) as bridge,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        alice = idp.token(key, "same-sub", email="alice@example.test")
        bob = idp.token(key, "same-sub", email="bob@example.test")
        headers = {**A2A_HEADERS, "Authorization": f"Bearer {alice}"}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": user_message("hello")},
        }
        sent = (await client.post(bridge.rpc_url, json=body, headers=headers)).json()
        mine = (await list_tasks(client, bridge.rpc_url, alice)).json()
        theirs = (await list_tasks(client, bridge.rpc_url, bob)).json()
        without_claim = await list_tasks(client, bridge.rpc_url, idp.token(key, "x"))
    assert [t["id"] for t in mine["result"]["tasks"]] == [sent["result"]["task"]["id"]]
    assert theirs["result"]["tasks"] == []
    assert without_claim.status_code == 401


async def test_keys_from_a_served_jwks_are_fetched_again_for_a_new_kid_but_not_for_a_flood(
    tmp_path: Path,
) -> None:
    old, new = idp.rsa_key("2026-11"), idp.rsa_key("2026-12")
    async with (
        idp.serve_jwks(idp.jwks(old)) as served,
        serve_bridge(make_settings(tmp_path, served_jwks_env(served.url))) as bridge,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        before = await list_tasks(client, bridge.rpc_url, idp.token(old, "alice"))
        fetched_once = served.fetches
        again = await list_tasks(client, bridge.rpc_url, idp.token(old, "alice"))
        cached = served.fetches
        # The identity provider rotates: the old key goes, a new one comes.
        served.document = idp.jwks(new)
        rotated = await list_tasks(client, bridge.rpc_url, idp.token(new, "alice"))
        after_rotation = served.fetches
        # Tokens naming random kids: each unknown, none fetches (one per interval).
        flood = [
            await list_tasks(
                client,
                bridge.rpc_url,
                idp.token(idp.SigningKey(uuid.uuid4().hex, new.private, "RS256"), "x"),
            )
            for _ in range(20)
        ]
        retired = await list_tasks(client, bridge.rpc_url, idp.token(old, "alice"))
        final = served.fetches
    assert before.status_code == 200, before.text
    assert again.status_code == 200
    assert rotated.status_code == 200, rotated.text
    assert (fetched_once, cached, after_rotation) == (1, 1, 2)
    assert [r.status_code for r in flood] == [401] * 20
    assert retired.status_code == 401
    assert final == 2, f"fetched {final} times; at most once per {REFRESH_INTERVAL_S} s"


async def test_an_unreachable_jwks_is_503_not_a_pass(tmp_path: Path) -> None:
    key = idp.rsa_key("k")
    async with (
        idp.serve_jwks({"keys": "not a list"}) as served,
        serve_bridge(make_settings(tmp_path, served_jwks_env(served.url))) as bridge,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        answers = [
            await list_tasks(client, bridge.rpc_url, idp.token(key, "alice")) for _ in range(5)
        ]
        fetches = served.fetches
    assert [r.status_code for r in answers] == [503] * 5
    assert fetches == 1  # the identity provider is not asked again for every request


async def test_the_card_declares_the_identity_providers_scheme_on_both_versions(
    tmp_path: Path,
) -> None:
    env = jwt_env(tmp_path, idp.jwks(idp.rsa_key("k")), A2A_JWT_REQUIRED_SCOPE="a2a")
    async with (
        serve_bridge(make_settings(tmp_path, env)) as bridge,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        card = (await client.get(bridge.url + CARD, headers={"A2A-Version": "1.0"})).json()
        card03 = (await client.get(bridge.url + CARD)).json()
    discovery = f"{idp.ISSUER}/.well-known/openid-configuration"
    schemes = card["securitySchemes"]
    assert schemes["oidc"]["openIdConnectSecurityScheme"]["openIdConnectUrl"] == discovery
    assert schemes["jwt"]["httpAuthSecurityScheme"]["bearerFormat"] == "JWT"
    assert {"schemes": {"oidc": {"list": ["a2a"]}}} in card["securityRequirements"]
    assert "bearer" not in schemes  # no token file here
    assert discovery in json.dumps(card03)


def test_algorithms_follow_the_key_type_never_hmac_or_none() -> None:
    rsa = idp.rsa_key("r").jwk
    ec = idp.ec_key("e").jwk
    assert allowed_algorithms(rsa) == ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
    assert allowed_algorithms({**rsa, "alg": "RS256"}) == ("RS256",)
    assert allowed_algorithms({**rsa, "alg": "HS256"}) == ()
    assert allowed_algorithms(ec) == ("ES256",)
    assert allowed_algorithms({**ec, "alg": "ES384"}) == ()
    assert allowed_algorithms({"kty": "oct", "k": "c2VjcmV0"}) == ()
    assert allowed_algorithms({**rsa, "use": "enc"}) == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"A2A_JWT_ISSUER": idp.ISSUER}, "A2A_JWT_AUDIENCE: must be set with A2A_JWT_ISSUER"),
        ({"A2A_JWT_ISSUER": idp.ISSUER, "A2A_JWT_AUDIENCE": "a"}, "needs the issuer's keys"),
        ({"A2A_JWT_AUDIENCE": "a"}, "A2A_JWT_AUDIENCE: needs A2A_JWT_ISSUER"),
        (
            {
                "A2A_JWT_ISSUER": idp.ISSUER,
                "A2A_JWT_AUDIENCE": "a",
                "A2A_JWT_JWKS_URL": "http://idp.example.test/jwks",
            },
            "must come over https",
        ),
    ],
)
def test_jwt_settings_are_checked_together(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_settings(tmp_path, env)


def test_a_jwks_file_without_a_signing_key_stops_the_start(tmp_path: Path) -> None:
    env = jwt_env(tmp_path, {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})
    with pytest.raises(ConfigError, match=r"A2A_JWT_JWKS_FILE: .* holds no asymmetric signing key"):
        make_settings(tmp_path, env)


async def test_a_token_file_and_jwts_together_name_their_own_principals(tmp_path: Path) -> None:
    key = idp.rsa_key("k")
    file_token = "file-token-" + "f" * 24
    (tmp_path / "tokens").write_text(f"svc-ci {hash_scrypt(file_token, n=2**10)}\n")
    env = jwt_env(tmp_path, idp.jwks(key), A2A_TOKEN_FILE=str(tmp_path / "tokens"))
    async with (
        serve_bridge(make_settings(tmp_path, env)) as bridge,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        made = await client.post(
            bridge.rpc_url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": user_message("think by the file's principal")},
            },
            headers={**A2A_HEADERS, "Authorization": f"Bearer {file_token}"},
        )
        by_file = await list_tasks(client, bridge.rpc_url, file_token)
        by_jwt = await list_tasks(client, bridge.rpc_url, idp.token(key, "alice"))
        wrong = await list_tasks(client, bridge.rpc_url, file_token + "x")
        card = (await client.get(bridge.url + CARD, headers={"A2A-Version": "1.0"})).json()
    assert (by_file.status_code, by_jwt.status_code, wrong.status_code) == (200, 200, 401)
    task_id = made.json()["result"]["task"]["id"]
    # Two principals: the file's caller sees its task, the JWT's does not.
    assert [t["id"] for t in by_file.json()["result"]["tasks"]] == [task_id]
    assert by_jwt.json()["result"].get("tasks", []) == []
    assert set(card["securitySchemes"]) == {"bearer", "oidc", "jwt"}


async def test_a_jwt_naming_the_reserved_default_principal_is_refused(tmp_path: Path) -> None:
    # `default` is A2A_TOKEN's caller and the owner of what was stored before principals.
    key = idp.rsa_key("k")
    env = jwt_env(tmp_path, idp.jwks(key), A2A_TOKEN="the-static-token-" + "t" * 20)
    async with (
        serve_bridge(make_settings(tmp_path, env)) as bridge,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        refused = await list_tasks(client, bridge.rpc_url, idp.token(key, "default"))
        accepted = await list_tasks(client, bridge.rpc_url, idp.token(key, "defaults"))
    assert refused.status_code == 401
    assert accepted.status_code == 200
