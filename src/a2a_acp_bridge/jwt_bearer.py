"""JWT bearer tokens from an identity provider (OIDC / OAuth 2): who signed, for whom, whose.

With A2A_JWT_ISSUER and A2A_JWT_AUDIENCE set, a bearer token that is a JWT is accepted when:

- its header names an asymmetric algorithm that the key it names (`kid`) is for: RS* and
  PS* for an RSA key, the ES* of its curve for an EC key, EdDSA for an OKP key, and only
  the key's own `alg` when the JWKS states one. `none` and every HS* are refused whatever
  the key, so a token "signed" with the RSA public key as an HMAC secret (the classic
  confusion) never verifies; symmetric (`oct`) keys in the set are ignored;
- its signature verifies with that key, and `exp` (required), `nbf` (when present), `iss`
  and `aud` hold, with `LEEWAY_S` of clock skew;
- its principal claim (`sub`, or A2A_JWT_PRINCIPAL_CLAIM) is a non-empty string without
  control characters, at most 255 characters;
- with A2A_JWT_REQUIRED_SCOPE, that scope is in `scope` (a space-separated string) or `scp`
  (a list, or a string).

Keys come from A2A_JWT_JWKS_FILE (read at start: offline) or A2A_JWT_JWKS_URL (fetched at
the first token, cached, fetched again after `MAX_AGE_S`, and at once for a `kid` it does
not hold, at most once per `REFRESH_INTERVAL_S`: a flood of tokens naming random kids costs
the identity provider one request per interval). A refusal says only which check failed,
never the token; the reason is logged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt

from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.principals import MAX_NAME_CHARS, has_control
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL

logger = logging.getLogger(__name__)

# Clock skew allowed on exp, nbf and iat.
LEEWAY_S = 30
# A JWKS fetched is used this long before it is fetched again.
MAX_AGE_S = 3600.0
# A kid the cached set lacks triggers a fetch at most this often.
REFRESH_INTERVAL_S = 60.0
# Bounds on one fetch of the JWKS.
FETCH_TIMEOUT_S = 10.0
MAX_JWKS_BYTES = 1024 * 1024
UNAVAILABLE = "the identity provider's keys cannot be fetched; try again later"

RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = {"P-256": ("ES256",), "P-384": ("ES384",), "P-521": ("ES512",)}
OKP_ALGORITHMS = {"Ed25519": ("EdDSA",), "Ed448": ("EdDSA",)}


class JwtRefused(Exception):
    """The token was not accepted; `reason` is safe to show and to log."""

    def __init__(self, reason: str, *, unavailable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        # The keys could not be had: the caller is told to try again (503), not refused.
        self.unavailable = unavailable


@dataclass(frozen=True)
class JwtPolicy:
    """What a JWT must satisfy (the A2A_JWT_* settings)."""

    issuer: str
    audience: str
    jwks_url: str | None = None
    jwks_file: Path | None = None
    principal_claim: str = "sub"
    required_scope: str | None = None

    @property
    def discovery_url(self) -> str:
        """The issuer's OpenID Connect discovery document (for the agent card)."""
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


@dataclass(frozen=True)
class VerifyingKey:
    kid: str | None
    algorithms: tuple[str, ...]
    key: Any


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


def allowed_algorithms(jwk: Mapping[str, Any]) -> tuple[str, ...]:
    """The asymmetric algorithms a JWK may verify (empty: the key is not used)."""
    kty = jwk.get("kty")
    if kty == "RSA":
        family: tuple[str, ...] = RSA_ALGORITHMS
    elif kty == "EC":
        family = EC_ALGORITHMS.get(str(jwk.get("crv")), ())
    elif kty == "OKP":
        family = OKP_ALGORITHMS.get(str(jwk.get("crv")), ())
    else:
        return ()  # oct (HMAC secrets) and anything unknown
    if jwk.get("use") not in (None, "sig"):
        return ()
    stated = jwk.get("alg")
    if stated is not None:
        return (stated,) if stated in family else ()
    return family


def verifying_keys(document: Any, source: str) -> tuple[VerifyingKey, ...]:
    """The usable keys of a JWKS document; ConfigError-free: bad keys are skipped, logged."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError(f"{source} is not a JWKS (an object with a `keys` list)")
    keys: list[VerifyingKey] = []
    for jwk in document["keys"]:
        if not isinstance(jwk, dict):
            continue
        algorithms = allowed_algorithms(jwk)
        if not algorithms:
            logger.info(
                "a JWKS key is not used (not an asymmetric signing key)",
                extra={"kid": jwk.get("kid"), "kty": jwk.get("kty"), "source": source},
            )
            continue
        try:
            loaded = jwt.PyJWK(jwk, algorithm=algorithms[0])
        except jwt.PyJWTError as exc:
            logger.warning(
                "a JWKS key cannot be read", extra={"kid": jwk.get("kid"), "problem": str(exc)}
            )
            continue
        kid = jwk.get("kid")
        keys.append(VerifyingKey(kid if isinstance(kid, str) else None, algorithms, loaded.key))
    return tuple(keys)


def read_jwks_file(variable: str, path: Path) -> tuple[VerifyingKey, ...]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(variable, f"{str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) else "is not JSON"
        raise ConfigError(variable, f"{str(path)!r} cannot be read: {problem}") from None
    try:
        keys = verifying_keys(document, str(path))
    except ValueError as exc:
        raise ConfigError(variable, str(exc)) from None
    if not keys:
        raise ConfigError(variable, f"{str(path)!r} holds no asymmetric signing key")
    return keys


Fetch = Callable[[str], Awaitable[Any]]


async def fetch_json(url: str) -> Any:
    """The JSON document at `url`, bounded in time and size."""
    async with (
        httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False) as client,
        client.stream("GET", url, headers={"accept": "application/json"}) as response,
    ):
        response.raise_for_status()
        body = b""
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_JWKS_BYTES:
                raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
    return json.loads(body)


class JwtVerifier:
    """Checks JWT bearer tokens against a policy and the issuer's keys."""

    def __init__(
        self,
        policy: JwtPolicy,
        *,
        fetch: Fetch = fetch_json,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self._fetch = fetch
        self._clock = clock
        self._keys: tuple[VerifyingKey, ...] = ()
        self._fetched_at: float | None = None
        self._refreshed_at: float | None = None
        self._failed_at: float | None = None
        self._lock = anyio.Lock()
        self.fetches = 0
        if policy.jwks_file is not None:
            self._keys = read_jwks_file("A2A_JWT_JWKS_FILE", policy.jwks_file)

    async def principal_of(self, token: str) -> str:
        """The principal of a valid token; JwtRefused otherwise."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise JwtRefused("the token is not a JWT") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise JwtRefused("the token is not signed")
        kid = header.get("kid")
        key = await self._key_for(kid if isinstance(kid, str) else None)
        if algorithm not in key.algorithms:
            raise JwtRefused(f"the algorithm {algorithm[:16]!r} is not accepted for this key")
        policy = self.policy
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key.key,
                algorithms=[algorithm],
                audience=policy.audience,
                issuer=policy.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise JwtRefused("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise JwtRefused("the token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise JwtRefused("the token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise JwtRefused("the token is from another issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise JwtRefused(f"the token has no {exc.claim!r} claim") from None
        except jwt.PyJWTError:
            raise JwtRefused("the token's signature does not verify") from None
        principal = claims.get(policy.principal_claim)
        if (
            not isinstance(principal, str)
            or not principal
            or len(principal) > MAX_NAME_CHARS
            or has_control(principal)
        ):
            raise JwtRefused(f"the token's {policy.principal_claim!r} claim names no principal")
        if principal == DEFAULT_PRINCIPAL:
            # `default` is A2A_TOKEN's caller and owns what was stored before principals: an
            # identity provider's user who happens to be called so must not become it.
            raise JwtRefused(
                f"the token's {policy.principal_claim!r} claim names a reserved principal"
            )
        if policy.required_scope is not None and policy.required_scope not in scopes(claims):
            raise JwtRefused(f"the token lacks the scope {policy.required_scope!r}")
        return principal

    async def _key_for(self, kid: str | None) -> VerifyingKey:
        if self.policy.jwks_url is not None:
            await self._refresh_if_old()
        found = _select(self._keys, kid)
        if found is None and self.policy.jwks_url is not None and kid is not None:
            await self._refresh_for_unknown_kid()
            found = _select(self._keys, kid)
        if found is None:
            raise JwtRefused("the token's key is not known" if kid else "the token names no key")
        return found

    async def _refresh_if_old(self) -> None:
        fetched = self._fetched_at
        if fetched is not None and self._clock() - fetched < MAX_AGE_S:
            return
        async with self._lock:
            if self._fetched_at is not fetched:
                return  # another request fetched it meanwhile
            failed = self._failed_at
            if failed is not None and self._clock() - failed < REFRESH_INTERVAL_S:
                # The last fetch failed moments ago: the identity provider is not asked
                # again for every request.
                if not self._keys:
                    raise JwtRefused(UNAVAILABLE, unavailable=True)
                return
            await self._load(required=fetched is None)

    async def _refresh_for_unknown_kid(self) -> None:
        async with self._lock:
            now = self._clock()
            last = self._refreshed_at
            if last is not None and now - last < REFRESH_INTERVAL_S:
                return
            self._refreshed_at = now
            await self._load(required=False)

    async def _load(self, *, required: bool) -> None:
        url = self.policy.jwks_url
        assert url is not None
        self.fetches += 1
        try:
            keys = verifying_keys(await self._fetch(url), url)
        except (httpx.HTTPError, ValueError, OSError) as exc:
            logger.warning("the JWKS could not be fetched", extra={"url": url, "problem": str(exc)})
            # Tried now: the next attempt waits its interval.
            self._failed_at = self._clock()
            if required or not self._keys:
                raise JwtRefused(UNAVAILABLE, unavailable=True) from None
            return
        self._keys = keys
        self._failed_at = None
        self._fetched_at = self._clock()
        logger.info("JWKS fetched", extra={"url": url, "keys": len(keys)})


def _select(keys: Sequence[VerifyingKey], kid: str | None) -> VerifyingKey | None:
    if kid is None:
        # No kid: only a set of one key is unambiguous.
        return keys[0] if len(keys) == 1 else None
    for key in keys:
        if key.kid == kid:
            return key
    return None


def scopes(claims: Mapping[str, Any]) -> set[str]:
    """The scopes a token grants: `scope` (space-separated) and `scp` (a list or a string)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(item for item in value if isinstance(item, str))
    return found
