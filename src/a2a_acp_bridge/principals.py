"""Principals: who a caller is, named, and the bearer tokens that say so.

A principal is a name. Every task, conversation and push config belongs to the principal
that created it; another principal is told exactly what an id that does not exist gets.
The names come from the token file (`NAME TOKEN` lines), from `A2A_TOKEN` (the one
principal `default`), or from a JWT's subject (jwt_bearer.py). Without authentication
every caller is `default`.

A token file line is one of:

    NAME TOKEN                    the token itself (16+ characters of A-Z a-z 0-9 - . _ ~ + /)
    NAME sha256:HEX               the SHA-256 of the token, 64 hex digits
    NAME scrypt:N:R:P:SALT:HASH   scrypt (N a power of two) with a base64 salt and hash
    TOKEN                         deprecated: principal `token-<position>` (1 for the first
                                  token of the file), with one warning in the log

`a2a-acp-bridge token hash` prints the `sha256:` (or, with `--scrypt`, the `scrypt:`)
form of a token read from stdin. A token is checked as a SHA-256 digest against every
plain and `sha256:` entry with `hmac.compare_digest`, never stopping early; `scrypt:`
entries are tried only when none of those matched, and a token that matched one is
remembered (as its digest) so the KDF's cost is paid once per token, not per request.

A conversation's key inside the bridge is (principal, contextId), written as one string
(`conversation_key`): the contextId alone for `default` (so conversations recorded before
principals existed keep their sandboxes), else the principal, a unit separator (U+001F)
and the contextId; a `default` contextId that itself holds the separator is written the
second way too. No principal name holds a control character, so a key without the
separator is `default`'s and one with it splits at its first separator into the pair:
two different pairs never share a key, whatever contextIds callers choose.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL

# A bearer token shorter than this is guessable; 16 characters of a random token is
# already far beyond online guessing.
MIN_TOKEN_CHARS = 16
# RFC 6750 b64token: what may stand after "Bearer " in an Authorization header.
TOKEN_RE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# A name in the token file or in A2A_ADMIN_PRINCIPALS.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+:|-]{0,127}")
# The longest principal name kept (the owner columns hold 255 characters).
MAX_NAME_CHARS = 255
KEY_SEPARATOR = "\x1f"
# scrypt's cost as `token hash --scrypt` writes it: 2**15 x 8 x 1 takes ~0.1 s and 32 MiB.
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
# Bounds on what a file may ask for: above them one check would hold a core for seconds.
SCRYPT_MAX_N = 2**20
SCRYPT_MAX_MEMORY = 256 * 1024 * 1024
POSITIONAL_PREFIX = "token-"


def has_control(text: str) -> bool:
    """Whether `text` holds a C0 control character or DEL (never in a name or a key part)."""
    return any(ord(char) < 0x20 or ord(char) == 0x7F for char in text)


def conversation_key(principal: str, context_id: str) -> str:
    """The bridge's one string for (principal, contextId); see the module's docstring."""
    if principal == DEFAULT_PRINCIPAL and KEY_SEPARATOR not in context_id:
        return context_id
    return f"{principal}{KEY_SEPARATOR}{context_id}"


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def check_token(where: str, token: str) -> str:
    """The token, or ConfigError naming `where` (never the token: it goes to logs)."""
    if not TOKEN_RE.fullmatch(token):
        raise ConfigError(
            where, "a token may hold only letters, digits and - . _ ~ + / (then = padding)"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            where,
            f"the token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "random ones (for example: openssl rand -hex 32)",
        )
    return token


def check_name(where: str, name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise ConfigError(
            where,
            f"{name[:40]!r} is not a principal name: 1 to 128 of A-Z a-z 0-9 . _ @ + : | - "
            "(starting with a letter or digit)",
        )
    return name


@dataclass(frozen=True)
class Scrypt:
    """An scrypt hash of a token, with its parameters."""

    n: int
    r: int
    p: int
    salt: bytes
    hash: bytes

    def matches(self, token: str) -> bool:
        computed = hashlib.scrypt(
            token.encode("utf-8"),
            salt=self.salt,
            n=self.n,
            r=self.r,
            p=self.p,
            maxmem=SCRYPT_MAX_MEMORY,
            dklen=len(self.hash),
        )
        return hmac.compare_digest(computed, self.hash)

    def text(self) -> str:
        salt = base64.b64encode(self.salt).decode()
        value = base64.b64encode(self.hash).decode()
        return f"scrypt:{self.n}:{self.r}:{self.p}:{salt}:{value}"


@dataclass(frozen=True)
class TokenEntry:
    """One accepted token: whose it is and how it is checked. `plain` is the token itself
    when it was given in clear (the CLI's `send` and `card` present it); `positional`: a
    bare token of the file, named by its position."""

    principal: str
    sha256: bytes | None = None
    scrypt: Scrypt | None = None
    plain: str | None = None
    positional: bool = False

    def __repr__(self) -> str:  # never the token, nor its digest
        return f"TokenEntry(principal={self.principal!r})"

    def accepts(self, token: str) -> bool:
        """Whether `token` is this entry's (for checks at start; requests go by TokenCheck)."""
        if self.sha256 is not None and hmac.compare_digest(digest(token), self.sha256):
            return True
        return self.scrypt is not None and self.scrypt.matches(token)


def hash_sha256(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def hash_scrypt(token: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    hashed = hashlib.scrypt(
        token.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=SCRYPT_MAX_MEMORY, dklen=32
    )
    return Scrypt(n, r, p, salt, hashed).text()


def _stored(where: str, principal: str, value: str) -> TokenEntry:
    """The entry for `NAME VALUE`: a plain token, `sha256:HEX` or `scrypt:...`."""
    if value.startswith("sha256:"):
        hexed = value.removeprefix("sha256:")
        if not re.fullmatch(r"[0-9a-fA-F]{64}", hexed):
            raise ConfigError(where, "a sha256: token hash is 64 hex digits")
        return TokenEntry(principal, sha256=bytes.fromhex(hexed))
    if value.startswith("scrypt:"):
        return TokenEntry(principal, scrypt=_scrypt(where, value))
    token = check_token(where, value)
    return TokenEntry(principal, sha256=digest(token), plain=token)


def _scrypt(where: str, value: str) -> Scrypt:
    fields = value.split(":")
    if len(fields) != 6:
        raise ConfigError(where, "an scrypt token hash is scrypt:N:R:P:SALT:HASH (base64)")
    try:
        n, r, p = (int(field) for field in fields[1:4])
        salt = base64.b64decode(fields[4], validate=True)
        hashed = base64.b64decode(fields[5], validate=True)
    except (ValueError, binascii.Error):
        raise ConfigError(
            where, "an scrypt token hash is scrypt:N:R:P:SALT:HASH (base64)"
        ) from None
    if n < 2 or n & (n - 1) or n > SCRYPT_MAX_N or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise ConfigError(
            where, f"scrypt's N must be a power of two up to {SCRYPT_MAX_N}, R 1-32, P 1-16"
        )
    if 128 * r * (n + p + 2) > SCRYPT_MAX_MEMORY:
        raise ConfigError(where, "scrypt's parameters need more than 256 MiB")
    if len(salt) < 8 or len(hashed) < 16:
        raise ConfigError(where, "an scrypt salt is 8 or more bytes and its hash 16 or more")
    return Scrypt(n, r, p, salt, hashed)


def parse_token_lines(variable: str, lines: Iterable[str]) -> tuple[TokenEntry, ...]:
    """The entries of a token file's lines (blank lines and # comments skipped); a line
    that is none of the forms stops the start, naming its number."""
    entries: list[TokenEntry] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{variable} line {number}"
        fields = line.split()
        if len(fields) == 1:
            name = f"{POSITIONAL_PREFIX}{len(entries) + 1}"
            token = check_token(where, fields[0])
            entries.append(TokenEntry(name, sha256=digest(token), plain=token, positional=True))
        elif len(fields) == 2:
            entries.append(_stored(where, check_name(where, fields[0]), fields[1]))
        else:
            raise ConfigError(
                where, "a line is NAME TOKEN, NAME sha256:HEX or NAME scrypt:... (two fields)"
            )
    owners: dict[bytes, str] = {}
    for entry in entries:
        if entry.sha256 is None:
            continue
        known = owners.setdefault(entry.sha256, entry.principal)
        if known != entry.principal:
            raise ConfigError(
                variable, f"one token is listed for two principals ({known} and {entry.principal})"
            )
    return tuple(entries)


class TokenCheck:
    """The accepted tokens: which principal a bearer token stands for."""

    def __init__(self, entries: Iterable[TokenEntry]) -> None:
        self._entries = tuple(entries)
        self._digests = tuple((e.sha256, e.principal) for e in self._entries if e.sha256)
        self._scrypts = tuple((e.scrypt, e.principal) for e in self._entries if e.scrypt)
        # Tokens that matched an scrypt entry, by digest (a bounded number: one per entry).
        self._verified: dict[bytes, str] = {}

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    @property
    def slow(self) -> bool:
        """Whether a check may compute scrypt (the guard runs it off the event loop)."""
        return bool(self._scrypts)

    @property
    def positional(self) -> tuple[str, ...]:
        return tuple(e.principal for e in self._entries if e.positional)

    def principal_of(self, token: str) -> str | None:
        """The principal whose token this is, or None."""
        return self.principal_of_fast(token) or self.principal_of_slow(token)

    def principal_of_fast(self, token: str) -> str | None:
        """The principal by digest: the plain and `sha256:` entries, and the tokens that
        matched an scrypt entry before."""
        offered = digest(token)
        found: str | None = None
        # Compare against every digest, without stopping early, so timing says nothing
        # about which one matched.
        for stored, principal in (*self._digests, *self._verified.items()):
            if hmac.compare_digest(offered, stored):
                found = principal
        return found

    def principal_of_slow(self, token: str) -> str | None:
        """The principal by the scrypt entries (tens of milliseconds each)."""
        for scrypt, principal in self._scrypts:
            if scrypt.matches(token):
                # Replaced, not changed: the event loop may be reading the old one.
                self._verified = {**self._verified, digest(token): principal}
                return principal
        return None
