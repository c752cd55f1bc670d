"""What ``stalkd serve`` starts with: :class:`Config`, the validated settings (every field
with beanstalkd's default, except the safer ones ``config`` explains), or :class:`Exit`, the
decision not to start. ``config.parse_args`` makes them from a command line; tests and
benchmarks build a ``Config`` directly.

This module imports nothing: it runs before the listening socket is bound.
"""

from __future__ import annotations

__all__ = ["Config", "Exit", "DEFAULT_PORT"]

DEFAULT_PORT = 11300


class Config:
    """Everything ``stalkd serve`` needs to start. Values are already validated; immutable
    (a plain slotted class, not a dataclass: ``dataclasses`` would add tens of ms to the time
    before the server listens).

    >>> Config().address
    '127.0.0.1:11300'
    >>> Config().replace(port=11301).port
    11301
    """

    __slots__ = ("listen", "port", "data_dir", "durability", "wal_size", "max_job_size", "user",
                 "verbosity", "log_level", "max_connections", "max_output", "warnings", "archive",
                 "unix", "socket_mode", "tls_listen", "tls_cert", "tls_key", "tls_client_ca",
                 "acl", "no_plain", "plain_network_ok",
                 "admin", "admin_token_file", "admin_tls",
                 "repair", "archive_url", "standby_of", "sync_standbys", "replication_secret",
                 "ha", "name", "ha_ttl", "advertise", "result_limits",
                 "max_memory", "max_handshakes_per_address", "handshake_timeout")  # fmt: skip
    listen: str  # host, or "unix:PATH"
    port: int
    data_dir: str | None  # None: in memory only, like beanstalkd without -b
    durability: str  # "always" | "never" | "every:<ms>"; unused without data_dir
    wal_size: int | None  # bytes per WAL segment; None: the WAL's default
    max_job_size: int
    user: str | None
    verbosity: int
    log_level: str
    max_connections: int
    max_output: int  # per-connection buffered reply bytes before it stops being read
    warnings: tuple[str, ...]  # things the parse accepted but the operator should know
    archive: bool  # retired WAL segments go to DIR/wal/archive/ instead of being deleted
    unix: tuple[str, ...]  # extra UNIX socket listeners (paths)
    socket_mode: int  # permission bits of every UNIX socket file we create
    tls_listen: tuple[tuple[str, int], ...]  # TLS listeners (host, port)
    tls_cert: str | None
    tls_key: str | None  # None: the key is in tls_cert's file
    tls_client_ca: str | None  # set: TLS clients must present a certificate these CAs signed
    acl: str | None  # TOML rules per client identity, for TLS listeners
    no_plain: bool  # no plain -l/-p listener
    plain_network_ok: bool  # the operator knows the plain listener is reachable from a network
    admin: tuple[str, int] | None  # (host, port) of the admin HTTP endpoint; None: off
    admin_token_file: str | None  # bearer token the admin endpoint requires
    admin_tls: bool  # the admin endpoint serves HTTPS with the TLS listeners' certificate
    repair: bool  # cut a damaged WAL at its damage instead of refusing to start
    archive_url: str | None  # sealed segments and snapshots are shipped there (stalkd.archive)
    standby_of: str | None  # the primary's address: run as its standby (stalkd.replication)
    sync_standbys: int  # standbys that must hold a change before its reply (0: asynchronous)
    replication_secret: str | None  # file holding the secret standbys prove (stalkd.replication.wire)
    ha: str | None  # the cluster address in etcd (stalkd.ha): the lease decides the role
    name: str | None  # this node's name in the cluster (--ha)
    ha_ttl: int  # seconds of the leader lease
    advertise: str | None  # HOST:PORT the other nodes and clients reach this server at
    # per owner: results, bytes of them, longest TTL (s); None: engine.results.ResultLimits' default
    result_limits: tuple[int | None, int | None, int | None]
    max_memory: int | None  # bytes all connections may hold (budget.py); None: from the machine
    max_handshakes_per_address: int  # TLS handshakes in progress from one client address
    handshake_timeout: float  # seconds a TLS handshake may take

    def __init__(self, *, listen: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 data_dir: str | None = None, durability: str = "always",
                 wal_size: int | None = None, max_job_size: int = 65535,
                 user: str | None = None, verbosity: int = 0, log_level: str = "info",
                 max_connections: int = 10_000, max_output: int = 4 * 2**20,
                 warnings: tuple[str, ...] = (), archive: bool = False,
                 unix: tuple[str, ...] = (), socket_mode: int = 0o660,
                 tls_listen: tuple[tuple[str, int], ...] = (), tls_cert: str | None = None,
                 tls_key: str | None = None, tls_client_ca: str | None = None,
                 acl: str | None = None, no_plain: bool = False,
                 plain_network_ok: bool = False,
                 admin: tuple[str, int] | None = None,
                 admin_token_file: str | None = None, admin_tls: bool = False,
                 repair: bool = False, archive_url: str | None = None,
                 standby_of: str | None = None, sync_standbys: int = 0,
                 replication_secret: str | None = None,
                 ha: str | None = None, name: str | None = None, ha_ttl: int = 5,
                 advertise: str | None = None,
                 result_limits: tuple[int | None, int | None, int | None] = (None, None, None),
                 max_memory: int | None = None, max_handshakes_per_address: int = 64,
                 handshake_timeout: float = 10.0) -> None:  # fmt: skip
        values = (listen, port, data_dir, durability, wal_size, max_job_size, user, verbosity,
                  log_level, max_connections, max_output, warnings, archive, unix, socket_mode,
                  tls_listen, tls_cert, tls_key, tls_client_ca, acl, no_plain,
                  plain_network_ok, admin, admin_token_file, admin_tls, repair, archive_url,
                  standby_of, sync_standbys, replication_secret, ha, name, ha_ttl, advertise,
                  result_limits, max_memory, max_handshakes_per_address, handshake_timeout)  # fmt: skip
        for k, v in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, k, v)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Config is immutable; use .replace({name}=...)")

    def replace(self, **changes: object) -> Config:
        """A copy with some fields changed (names are checked)."""
        unknown = set(changes) - set(self.__slots__)
        if unknown:
            raise TypeError(f"unknown Config fields: {sorted(unknown)}")
        new = object.__new__(Config)
        for k in self.__slots__:
            object.__setattr__(new, k, changes.get(k, getattr(self, k)))
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, k) for k in self.__slots__))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"Config({inner})"

    @property
    def unix_path(self) -> str | None:
        return self.listen[5:] if self.listen.startswith("unix:") else None

    @property
    def address(self) -> str:
        path = self.unix_path
        if path is not None:
            return f"unix:{path}"
        host = f"[{self.listen}]" if ":" in self.listen else self.listen
        return f"{host}:{self.port}"

    @property
    def effective_log_level(self) -> str:
        # -V raises verbosity like beanstalkd's; it never lowers an explicit --log-level.
        return "debug" if self.verbosity > 0 and self.log_level == "info" else self.log_level


class Exit:
    """Do not start: print ``stdout``/``stderr`` and exit with ``code``."""

    __slots__ = ("code", "stdout", "stderr")

    def __init__(self, code: int, stdout: str = "", stderr: str = "") -> None:
        self.code = code
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self) -> str:
        return f"Exit(code={self.code!r}, stdout={self.stdout!r}, stderr={self.stderr!r})"
