"""An identity provider for tests: signing keys, their JWKS, tokens, and a JWKS served over
real HTTP on 127.0.0.1 (whose keys a test can rotate, counting the fetches)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

ISSUER = "https://idp.example.test/realms/agents"
AUDIENCE = "a2a-acp-bridge"
JWKS_START_S = 10.0


@dataclass
class SigningKey:
    kid: str
    private: Any
    algorithm: str

    @property
    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            found: dict[str, Any] = RSAAlgorithm.to_jwk(public, as_dict=True)
        else:
            found = ECAlgorithm.to_jwk(public, as_dict=True)
        return {**found, "kid": self.kid, "use": "sig"}

    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


def rsa_key(kid: str) -> SigningKey:
    return SigningKey(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, ec.generate_private_key(ec.SECP256R1()), "ES256")


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [key.jwk for key in keys]}


def claims(sub: str, **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    found: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": sub,
        "iat": now,
        "nbf": now - 5,
        "exp": now + 600,
        "scope": "openid a2a",
    }
    found.update(overrides)
    return {name: value for name, value in found.items() if value is not None}


def token(key: SigningKey, sub: str, **overrides: Any) -> str:
    return jwt.encode(
        claims(sub, **overrides), key.private, algorithm=key.algorithm, headers={"kid": key.kid}
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(kid: str, sub: str) -> str:
    """`alg: none`, no signature."""
    header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    payload = _b64(json.dumps(claims(sub)).encode())
    return f"{header}.{payload}."


def confused_token(key: SigningKey, sub: str) -> str:
    """HS256 "signed" with the RSA public key (PEM) as the HMAC secret: the classic confusion
    a verifier falls for when it lets the token choose the algorithm."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    payload = _b64(json.dumps(claims(sub)).encode())
    signed = f"{header}.{payload}".encode()
    signature = hmac.new(key.public_pem(), signed, hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


@dataclass
class ServedJwks:
    url: str
    document: dict[str, Any]
    fetches: int = 0
    fetched: anyio.Event = field(default_factory=anyio.Event)


@contextlib.asynccontextmanager
async def serve_jwks(document: dict[str, Any]) -> AsyncIterator[ServedJwks]:
    """The JWKS at http://127.0.0.1:PORT/jwks; assign `.document` to rotate the keys."""
    served = ServedJwks(url="", document=document)

    async def keys(_request: Request) -> Response:
        served.fetches += 1
        served.fetched.set()
        return JSONResponse(served.document)

    app = Starlette(routes=[Route("/jwks", keys, methods=["GET"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        with anyio.fail_after(JWKS_START_S):
            while not server.started:
                if server.should_exit:
                    raise RuntimeError("the JWKS server did not start")
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        served.url = f"http://127.0.0.1:{port}/jwks"
        try:
            yield served
        finally:
            server.should_exit = True
