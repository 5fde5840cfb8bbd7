"""Adapter isolation: what the kernel lets an adapter, and everything it starts, touch.

With `ACP_ISOLATION` on (the default), every adapter is confined by Landlock from the
moment it is exec'd, and so is each of its descendants, asked about or not:

- it may write only its conversation's root (the sandbox, or `ACP_CWD`) and its
  conversation's own state directory (`homes.py`: its HOME, with TMPDIR inside);
- it may read only what running needs: the system's directories (`SYSTEM_READ`), the
  bridge's Python, Node, the adapter's installation, the files its command line names,
  and `ACP_ISOLATION_READ`; never the bridge's working directory, state, token file or
  the operator's HOME (`Isolation` refuses to start if a grant would contain one);
- it may not signal, ptrace or read `/proc/<pid>/environ|mem` of any process outside its
  own tree (the bridge, other conversations' adapters), nor reach their abstract UNIX
  sockets (Landlock scoping, ABI 6; ptrace since ABI 1);
- it may not connect to the bridge's own TCP port; every other port stays open (model
  APIs, proxies, servers the agent starts itself).

Two layers are applied in the child: the conversation's filesystem ruleset (small, made
per spawn) and the network ruleset (one rule per allowed port, made once when the
bridge knows its port). docs/isolation.md has the threat model and the measurements.

`Confinement` is the pure answer to "what may this adapter do"; `Isolation` computes it
and turns it into rulesets; `landlock.py` talks to the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import anyio

from a2a_acp_bridge import landlock
from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.config import Settings, adapters_dir
from a2a_acp_bridge.errors import AdapterStartError, ConfigError

logger = logging.getLogger(__name__)

# The Landlock ABI isolation needs: TCP connect rules (4) keep the agent off the bridge's
# port, signal and abstract-socket scoping (6) keep it from signalling the bridge.
REQUIRED_ABI = 6
REQUIRED_KERNEL = "Linux 6.12"
OFF_HINT = (
    "set ACP_ISOLATION=off to run adapters without kernel confinement (weaker: the agent's "
    "commands then run with the bridge's own rights, docs/isolation.md)"
)

# Trees every adapter may read (and run programs from) when they exist: the system's
# programs and libraries, its configuration (name resolution, CA bundle, passwd, locale),
# the kernel's views of processes and devices, and systemd-resolved's resolv.conf.
SYSTEM_READ = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/proc",
    "/sys",
    "/run/systemd/resolve",
)
# Device files every adapter may read, write and ioctl: the usual sinks and sources, and
# pseudo-terminals (codex runs commands on a pty).
DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
)
READ = landlock.EXECUTE | landlock.READ_FILE | landlock.READ_DIR
DEVICE = landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE | landlock.IOCTL_DEV


@dataclass(frozen=True)
class Confinement:
    """What one adapter may touch: the pure result of the policy, applied by `Isolation`."""

    abi: int
    readable: tuple[Path, ...]
    writable: tuple[Path, ...]
    devices: tuple[Path, ...]
    denied_ports: tuple[int, ...]


@dataclass(frozen=True)
class IsolationStatus:
    """Which isolation is in force, for /readyz, the startup log and the agent card."""

    mechanism: str  # "landlock" or "off"
    abi: int | None = None

    @property
    def label(self) -> str:
        return f"landlock-abi{self.abi}" if self.mechanism == "landlock" else "off"

    def sentence(self) -> str:
        if self.mechanism == "landlock":
            return (
                "Each adapter and everything it starts run confined by the kernel (Landlock "
                f"ABI {self.abi}): they may write only their conversation's directory and "
                "state, cannot read the bridge's files or other conversations', and cannot "
                "signal the bridge or reach its port."
            )
        return (
            "Adapters run without kernel confinement (ACP_ISOLATION=off): a command the "
            "bridge allows runs with the bridge's own rights."
        )


def is_within(path: Path, tree: Path) -> bool:
    """`path` is `tree` or lies beneath it (both absolute and resolved)."""
    return path == tree or tree in path.parents


def unsafe_grants(grants: Iterable[Path], protected: Iterable[Path]) -> list[tuple[Path, Path]]:
    """Each (grant, protected path) where granting the tree would expose the protected one."""
    kept = list(protected)
    return [(grant, secret) for grant in grants for secret in kept if is_within(secret, grant)]


def _path_entries(path_variable: str) -> list[str]:
    return [entry for entry in path_variable.split(os.pathsep) if entry.startswith("/")]


def _resolved(path: str | Path) -> Path | None:
    try:
        return Path(path).resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _unique(paths: Iterable[Path | None]) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for path in paths:
        if path is not None:
            seen.setdefault(path, None)
    return tuple(seen)


def python_paths() -> list[Path | None]:
    """The bridge's own Python: its installation, its environment and the packages it
    imports (the demo agent and scripted agents run on it)."""
    found: list[Path | None] = [
        _resolved(prefix)
        for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    ]
    found += [_resolved(path) for path in sysconfig.get_paths().values()]
    executable = _resolved(sys.executable)
    if executable is not None:
        found.append(executable.parent.parent)
    # An editable install imports the package from its source tree, outside the prefix.
    import a2a_acp_bridge

    found.append(_resolved(Path(a2a_acp_bridge.__file__).parent.parent))
    return found


def node_paths(path_variable: str) -> list[Path | None]:
    """The installation of the `node` the adapter's PATH finds (prefix of bin/node)."""
    node = shutil.which("node", path=path_variable)
    executable = _resolved(node) if node else None
    return [executable.parent.parent] if executable is not None else []


def command_paths(command: Sequence[str], path_variable: str) -> list[Path | None]:
    """What the agent's command line names: its program (the whole node_modules tree it
    lives in, for an npm-installed adapter) and every absolute path among its arguments."""
    found: list[Path | None] = []
    program = command[0] if "/" in command[0] else shutil.which(command[0], path=path_variable)
    if program:
        found.append(_installation(Path(program)))
    found += [_resolved(arg) for arg in command[1:] if arg.startswith("/")]
    return found


def _installation(program: Path) -> Path | None:
    real = _resolved(program)
    if real is None:
        return None
    for candidate in (program.absolute(), real):
        parts = candidate.parts
        if "node_modules" in parts:
            return _resolved(Path(*parts[: parts.index("node_modules") + 1]))
    return real


class Isolation:
    """The bridge's isolation policy: off, or Landlock with what every adapter may read.

    Raises ConfigError (naming ACP_ISOLATION, ACP_ISOLATION_READ or ACP_ISOLATION_WRITE)
    when isolation is requested but the kernel cannot give it, or a grant would expose
    what must stay hidden: the bridge refuses to run rather than run unconfined."""

    def __init__(
        self,
        settings: Settings,
        environ: Mapping[str, str],
        *,
        probe: Callable[[], int] = landlock.abi_version,
    ) -> None:
        self.enabled = settings.isolation
        self.abi: int | None = None
        self._denied_ports: tuple[int, ...] = ()
        self._network: landlock.Ruleset | None = None
        self._ports_known: asyncio.Event | None = None
        self.readable: tuple[Path, ...] = ()
        self.capabilities = 0
        self.shared_writable: tuple[Path, ...] = ()
        if not self.enabled:
            return
        try:
            abi = probe()
        except landlock.LandlockError as exc:
            raise ConfigError(
                "ACP_ISOLATION", f"adapter isolation is unavailable: {exc}; {OFF_HINT}"
            ) from None
        if abi < REQUIRED_ABI:
            raise ConfigError(
                "ACP_ISOLATION",
                f"the kernel's Landlock is ABI {abi}; adapter isolation needs ABI "
                f"{REQUIRED_ABI} ({REQUIRED_KERNEL}) for TCP connect rules and signal "
                f"scoping; {OFF_HINT}",
            )
        self.abi = abi
        # A bridge running as root must not hand root's capabilities on (landlock.py).
        self.capabilities = landlock.capability_count() if landlock.has_capabilities() else 0
        self.protected = self._protected(settings, environ)
        path_variable = environ.get("PATH", os.defpath)
        home = self._operator_home(environ)
        derived = [
            *(_resolved(p) for p in SYSTEM_READ),
            *python_paths(),
            *node_paths(path_variable),
            *command_paths(settings.agent.command, path_variable),
            _resolved(adapters_dir() / "node_modules"),
            # PATH's directories, but nothing of the operator's HOME (~/.cargo/bin, pyenv
            # shims): `environment` takes those out of the adapter's PATH instead.
            *(
                entry
                for entry in (_resolved(p) for p in _path_entries(path_variable))
                if entry is not None and (home is None or not is_within(entry, home))
            ),
        ]
        # Derived grants that would expose a protected path are left out (a PATH entry
        # such as the working directory); the operator's own grants must be safe.
        dropped = unsafe_grants(_unique(derived), self.protected)
        for grant, secret in dropped:
            logger.info(
                "isolation: not readable by adapters",
                extra={"path": str(grant), "protects": str(secret)},
            )
        unsafe = {grant for grant, _ in dropped}
        readable = [p for p in _unique(derived) if p not in unsafe]
        for variable, grants in (
            ("ACP_ISOLATION_READ", settings.isolation_read),
            ("ACP_ISOLATION_WRITE", settings.isolation_write),
        ):
            for grant, secret in unsafe_grants(grants, self.protected):
                raise ConfigError(
                    variable,
                    f"{grant} contains {secret}, which adapters must not reach (the bridge's "
                    "working directory, state, sandboxes, token file or the operator's HOME)",
                )
        if settings.acp_cwd is not None:
            for _, secret in unsafe_grants([settings.acp_cwd], self.protected):
                raise ConfigError(
                    "ACP_CWD",
                    f"{settings.acp_cwd} contains {secret}, which adapters must not reach; "
                    "hand the agent a directory beside the bridge's own",
                )
        self.readable = _unique([*readable, *settings.isolation_read])
        self.shared_writable = settings.isolation_write

    @staticmethod
    def _protected(settings: Settings, environ: Mapping[str, str]) -> tuple[Path, ...]:
        """What no grant may contain: the bridge's working directory (its .env), its state,
        the sandboxes' parent (other conversations), the token file, the operator's HOME."""
        candidates: list[Path | None] = [
            _resolved(settings.workdir),
            _resolved(Path.cwd()),
            _resolved(settings.state_dir) or settings.state_dir,
            _resolved(settings.sandbox_parent) or settings.sandbox_parent,
        ]
        if settings.token_file is not None:
            candidates.append(_resolved(settings.token_file))
        candidates.append(Isolation._operator_home(environ))
        return _unique(p.absolute() if p is not None else None for p in candidates)

    @staticmethod
    def _operator_home(environ: Mapping[str, str]) -> Path | None:
        home = environ.get("HOME")
        resolved = _resolved(home) if home else None
        # A HOME of / (a service user without one) protects nothing and would forbid all.
        return resolved if resolved is not None and resolved != Path("/") else None

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """The adapter's environment with PATH cut to the directories it may read: a
        program found elsewhere (a pyenv shim in the operator's HOME) could only fail."""
        result = dict(env)
        if not self.enabled or "PATH" not in result:
            return result
        kept = [
            entry
            for entry in _path_entries(result["PATH"])
            if (resolved := _resolved(entry)) is not None
            and any(is_within(resolved, tree) for tree in self.readable)
        ]
        result["PATH"] = os.pathsep.join(dict.fromkeys(kept)) or os.defpath
        return result

    @property
    def status(self) -> IsolationStatus:
        if self.enabled and self.abi is not None:
            return IsolationStatus("landlock", self.abi)
        return IsolationStatus("off")

    # --- the network layer ----------------------------------------------------------

    def deny_ports(self, ports: Iterable[int]) -> None:
        """The bridge listens on `ports`: no adapter started from now on may connect there.
        Builds the network ruleset once (65535 rules take ~80 ms): every other port is
        allowed, since Landlock's TCP rules allow, they cannot deny."""
        if not self.enabled:
            return
        denied = tuple(sorted(set(ports)))
        if denied and denied != self._denied_ports:
            ruleset = landlock.Ruleset(net=landlock.CONNECT_TCP)
            ruleset.allow_ports(
                (p for p in range(landlock.MAX_PORT + 1) if p not in denied),
                landlock.CONNECT_TCP,
            )
            if self._network is not None:
                self._network.close()
            self._network, self._denied_ports = ruleset, denied
        if self._ports_known is not None:
            self._ports_known.set()

    @property
    def denied_ports(self) -> tuple[int, ...]:
        return self._denied_ports

    def expect_ports(self) -> None:
        """The bridge is about to listen (server.py): adapters wait for its port, so none
        starts before the network layer that keeps it off that port exists."""
        if self.enabled and self._ports_known is None:
            self._ports_known = asyncio.Event()

    async def _ports_ready(self, within_s: float) -> None:
        if self._ports_known is None or self._ports_known.is_set():
            return
        try:
            with anyio.fail_after(within_s):
                await self._ports_known.wait()
        except TimeoutError:
            raise AdapterStartError(
                "the bridge is not listening yet, so its adapters cannot be confined"
            ) from None

    # --- one adapter ----------------------------------------------------------------

    async def confine(self, boundary: Boundary, *, within_s: float) -> Confined | None:
        """How the adapter of this conversation is confined; None with isolation off.
        Waits (bounded) for the bridge's port when a server is about to bind one."""
        spec = self.confinement(boundary)
        if spec is None:
            return None
        await self._ports_ready(within_s)
        return Confined(replace(spec, denied_ports=self._denied_ports), self)

    def confinement(self, boundary: Boundary) -> Confinement | None:
        """What the adapter of this conversation may touch; None with isolation off."""
        if not self.enabled or self.abi is None:
            return None
        writable = [boundary.root]
        if boundary.home is not None:
            writable.append(boundary.home)
        return Confinement(
            abi=self.abi,
            readable=self.readable,
            writable=_unique([*writable, *self.shared_writable]),
            devices=tuple(Path(p) for p in DEVICES),
            denied_ports=self._denied_ports,
        )

    @contextlib.contextmanager
    def rulesets(self, confinement: Confinement) -> Iterator[tuple[int, ...]]:
        """The ruleset descriptors the child restricts itself with, in order: the
        conversation's filesystem layer (made now, closed after the spawn), then the
        network layer. Filesystem first: each new layer copies the rules of the layers
        under it, so the 65535-rule network layer is copied once, not twice."""
        abi = confinement.abi
        rights = landlock.fs_rights(abi)
        ruleset = landlock.Ruleset(
            fs=rights,
            scoped=landlock.SCOPE_SIGNAL | landlock.SCOPE_ABSTRACT_UNIX_SOCKET,
        )
        try:
            for path in confinement.readable:
                ruleset.allow_path(path, READ)
            for path in confinement.devices:
                ruleset.allow_path(path, DEVICE)
            for path in confinement.writable:
                if not ruleset.allow_path(path, rights):
                    raise landlock.LandlockError(f"the writable directory {path} does not exist")
            fds = [ruleset.fd]
            if confinement.denied_ports:
                if self._network is None or self._denied_ports != confinement.denied_ports:
                    self.deny_ports(confinement.denied_ports)
                assert self._network is not None
                fds.append(self._network.fd)
            yield tuple(fds)
        finally:
            ruleset.close()


@dataclass(frozen=True)
class Confined:
    """One adapter's confinement, ready to apply in its child process (acp/process.py)."""

    spec: Confinement
    isolation: Isolation

    @property
    def label(self) -> str:
        return f"landlock-abi{self.spec.abi}"

    @contextlib.contextmanager
    def preexec(self) -> Iterator[Callable[[], None]]:
        """The function the child runs between fork and exec, valid inside the block."""
        with self.isolation.rulesets(self.spec) as fds:
            yield functools.partial(
                landlock.restrict, fds, capabilities=self.isolation.capabilities
            )
