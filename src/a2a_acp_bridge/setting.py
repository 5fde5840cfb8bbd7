"""A setting: one row of the configuration table, and the kinds of value a row can hold.

`config.Settings` declares each setting as a field made by `setting()`: its environment
variable, its kind, its default (as written in the environment, in the kind's unit), and
its doc. `settings_table()` reads those rows back, `parse_settings()` turns raw strings
into their values, `markdown_table()` renders the table README.md and docs/operations.md
show and `with_table()` puts it between their markers. A kind turns one variable's text
into a typed value or raises `ConfigError` naming the variable: that is the whole of
validation for one value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from a2a_acp_bridge.errors import ConfigError

T = TypeVar("T")
METADATA_KEY = "a2a_acp_bridge.setting"
MIB = 1024 * 1024

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class Kind(Generic[T]):
    """How the text of one variable becomes a value (`base`: the working directory)."""

    @property
    def unit(self) -> str:
        """The unit the text is written in, shown beside the default ("ms", "bytes")."""
        return ""

    @property
    def blank(self) -> str:
        """How the docs show an empty default."""
        return "empty"

    @property
    def secret(self) -> bool:
        """A secret stays out of the Settings' repr, so out of any line that prints it."""
        return False

    def parse(self, variable: str, text: str, base: Path) -> T:
        raise NotImplementedError


@dataclass(frozen=True)
class Setting:
    """One row of the table. `variable` None: a command-line flag only (`--insecure`)."""

    variable: str | None
    kind: Kind[Any]
    default: str
    doc: str
    flag: str | None = None
    shown: str | None = None
    excludes: str | None = None  # a variable that may not be set together with this one
    name: str = ""  # the Settings field, filled in by settings_table()

    @property
    def label(self) -> str:
        """How error messages and the docs name it: the variable, else the flag."""
        return self.variable or self.flag or self.name

    def value(self, env: Mapping[str, str], switches: Mapping[str, bool], base: Path) -> Any:
        """This row's value (unset or blank: the default), or ConfigError naming it.

        `switches` holds the flag-only rows (`--insecure`: True when given)."""
        if self.variable is None:
            raw = "true" if switches.get(self.flag or "") else ""
        else:
            raw = env.get(self.variable, "").strip()
        if raw and self.excludes and env.get(self.excludes, "").strip():
            # Before the value is read: a file that is not there is beside the point.
            raise ConfigError(self.label, f"set either {self.excludes} or {self.label}, not both")
        return self.kind.parse(self.label, raw or self.default, base)


def setting(
    variable: str | None,
    kind: Kind[T],
    default: str,
    doc: str,
    *,
    flag: str | None = None,
    shown: str | None = None,
    excludes: str | None = None,
) -> T:
    """A dataclass field that is a row of the table (see config.Settings)."""
    row = Setting(variable, kind, default, doc, flag, shown, excludes)
    return cast(T, dataclasses.field(repr=not kind.secret, metadata={METADATA_KEY: row}))


def settings_table(cls: type[Any]) -> tuple[Setting, ...]:
    """The rows declared on a dataclass, in declaration order."""
    return tuple(
        dataclasses.replace(item.metadata[METADATA_KEY], name=item.name)
        for item in dataclasses.fields(cls)
        if METADATA_KEY in item.metadata
    )


def parse_settings(
    rows: Sequence[Setting], env: Mapping[str, str], switches: Mapping[str, bool], base: Path
) -> dict[str, Any]:
    """Each row's value by field name, in the table's order (the first error wins)."""
    return {row.name: row.value(env, switches, base) for row in rows}


def markdown_table(rows: Sequence[Setting]) -> str:
    """The configuration table as README.md and docs/operations.md show it."""
    lines = ["| variable (flag) | default | effect |", "|---|---|---|"]
    for row in rows:
        name = f"`{row.variable}`" if row.variable else ""
        if row.flag:
            name = f"{name} (`{row.flag}`)".strip()
        lines.append(f"| {name} | {_shown_default(row)} | {row.doc} |")
    return "\n".join(lines) + "\n"


# Where the table stands in a Markdown document (scripts/settings_table rewrites it).
TABLE_START = "<!-- the settings table: config.Settings made it (scripts/settings_table) -->"
TABLE_END = "<!-- end of the settings table -->"


def with_table(document: str, table: str) -> str:
    """`document` with the text between its table markers replaced by `table`."""
    head, start, rest = document.partition(TABLE_START + "\n")
    _, end, tail = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"no {TABLE_START!r} ... {TABLE_END!r} in the document")
    return head + start + table + end + tail


def _shown_default(row: Setting) -> str:
    if row.shown is not None:
        return row.shown
    if not row.default:
        return row.kind.blank
    shown = f"`{row.default}`"
    if row.kind.unit:
        shown += f" {row.kind.unit}"
    if row.kind.unit == "bytes" and int(row.default) % MIB == 0:
        shown += f" ({int(row.default) // MIB} MiB)"
    return shown


# --- the kinds ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text(Kind[str]):
    """Any text, surrounding blanks removed."""

    def parse(self, variable: str, text: str, base: Path) -> str:
        return text


@dataclass(frozen=True)
class OrUnset(Kind[T | None]):
    """The inner kind, or None when the variable is unset or blank."""

    inner: Kind[T]
    blank = "unset"

    @property
    def secret(self) -> bool:
        return self.inner.secret

    def parse(self, variable: str, text: str, base: Path) -> T | None:
        return self.inner.parse(variable, text, base) if text else None


@dataclass(frozen=True)
class Boolean(Kind[bool]):
    """true/false, yes/no, on/off or 1/0."""

    def parse(self, variable: str, text: str, base: Path) -> bool:
        return parse_bool(variable, text)


@dataclass(frozen=True)
class Integer(Kind[int]):
    """A whole number within bounds, in `unit` (empty for a count)."""

    minimum: int
    maximum: int | None = None
    unit: str = ""

    def parse(self, variable: str, text: str, base: Path) -> int:
        return parse_int(variable, text, minimum=self.minimum, maximum=self.maximum)


@dataclass(frozen=True)
class Duration(Kind[float]):
    """Whole milliseconds in the variable (its name ends in _MS), seconds in the field."""

    minimum_ms: int = 1
    unit = "ms"

    def parse(self, variable: str, text: str, base: Path) -> float:
        return parse_int(variable, text, minimum=self.minimum_ms) / 1000


@dataclass(frozen=True)
class Port(Kind[int]):
    """A TCP port; 0 asks for any free one."""

    def parse(self, variable: str, text: str, base: Path) -> int:
        try:
            return parse_int(variable, text, minimum=0, maximum=65535)
        except ConfigError:
            raise ConfigError(variable, f"{text!r} is not a port number (0-65535)") from None


@dataclass(frozen=True)
class Url(Kind[str]):
    """An http:// or https:// URL."""

    def parse(self, variable: str, text: str, base: Path) -> str:
        if not text.startswith(("http://", "https://")):
            raise ConfigError(variable, f"{text!r} is not an http:// or https:// URL")
        return text


@dataclass(frozen=True)
class Choice(Kind[str]):
    """One of a few words, compared lowercased (or uppercased), returned so."""

    options: tuple[str, ...]
    upper: bool = False

    def parse(self, variable: str, text: str, base: Path) -> str:
        word = text.upper() if self.upper else text.lower()
        if word not in self.options:
            raise ConfigError(variable, f"{word!r} is not one of {', '.join(self.options)}")
        return word


@dataclass(frozen=True)
class Directory(Kind[Path]):
    """An existing directory, resolved once (symlinks included) against the working one."""

    def parse(self, variable: str, text: str, base: Path) -> Path:
        return parse_directory(variable, text, base=base)


@dataclass(frozen=True)
class Location(Kind[Path]):
    """A path, made absolute against the working directory; it need not exist yet."""

    def parse(self, variable: str, text: str, base: Path) -> Path:
        path = Path(text).expanduser()
        return path if path.is_absolute() else base / path


@dataclass(frozen=True)
class HostNames(Kind[tuple[str, ...]]):
    """Comma-separated host names (no scheme, no port), lowercased."""

    def parse(self, variable: str, text: str, base: Path) -> tuple[str, ...]:
        return parse_hosts(variable, text)


@dataclass(frozen=True)
class VariableNames(Kind[tuple[str, ...]]):
    """Comma-separated environment variable names."""

    def parse(self, variable: str, text: str, base: Path) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        for name in names:
            if not name.replace("_", "").isalnum():
                raise ConfigError(variable, f"{name!r} is not an environment variable name")
        return names


# --- the parsers the kinds share ------------------------------------------------------------


def parse_bool(variable: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(variable, f"{value!r} is not a boolean (use true or false)")


def parse_int(variable: str, value: str, *, minimum: int, maximum: int | None = None) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ConfigError(variable, f"{value!r} is not a whole number") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(variable, f"{number} is out of range (must be {bound})")
    return number


def parse_directory(variable: str, value: str, *, base: Path) -> Path:
    """An existing directory, resolved once (symlinks included) against `base`."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    if not path.exists():
        raise ConfigError(variable, f"{value!r} does not exist")
    if not path.is_dir():
        raise ConfigError(variable, f"{value!r} is not a directory")
    return path.resolve(strict=True)


def parse_hosts(variable: str, value: str) -> tuple[str, ...]:
    """Comma-separated host names (no scheme, no port), lowercased."""
    hosts = []
    for item in value.split(","):
        name = item.strip().lower()
        if not name:
            continue
        if any(c in name for c in "/ @") or name.count(":") == 1:
            raise ConfigError(variable, f"{item.strip()!r} is not a host name (no scheme or port)")
        hosts.append(name.strip("[]"))
    return tuple(hosts)
