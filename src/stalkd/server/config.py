"""Server configuration from beanstalkd's command line (plus readable long names), as a pure parse.

``parse_args(argv)`` never prints or exits: it returns a :class:`Config` or an :class:`Exit`
(text for stdout/stderr and a status code), so every flag case is a table-driven unit test and
``stalkd serve`` / ``stalkd-server`` decide what to do with it.

Ensures: every flag beanstalkd 1.12 accepts is accepted with the same meaning and the same
spelling rules (single-letter flags grouped, values attached or separate: ``-VVp11300``,
``-p 11300``); an unknown flag or a stray argument gives exit status 5 as beanstalkd does; a
bad value names the flag and the value. Deliberate differences from beanstalkd: the default
listen address is 127.0.0.1 (not 0.0.0.0), and with ``-b`` the default policy is ``always``
(beanstalkd's is fsync at most every 50 ms, which loses acknowledged jobs on power loss).

This module imports nothing heavy: it runs before the listening socket is bound.

Example:
    >>> parse_args(["-l", "127.0.0.1", "-p11301", "-b", "/tmp/q", "-f0"]).durability
    'always'
    >>> parse_args(["-x"]).code
    5
"""

from __future__ import annotations

from collections.abc import Sequence  # collections.abc is imported at start-up anyway

__all__ = [
    "Config", "Exit", "parse_args", "USAGE", "VERSION_TEXT", "version_text", "DEFAULT_PORT",
    "MAX_JOB_SIZE_LIMIT", "LOG_LEVELS", "is_loopback",
]  # fmt: skip

DEFAULT_PORT = 11300
MAX_JOB_SIZE_LIMIT = 1 << 30  # beanstalkd clamps -z to 1 GiB with a warning
LOG_LEVELS = ("debug", "info", "warning", "error")
BEANSTALKD_VERSION = "1.13"  # the protocol dialect we speak; clients gate features on it
VERSION_TEXT = f"beanstalkd {BEANSTALKD_VERSION} (stalkd 0.1.0)\n"


def version_text() -> str:
    """``-v``: the dialect first (clients read it), then which parser runs, so a test or a
    person can tell whether the C accelerator was built and is in use (``STALKD_NO_EXTENSIONS``).
    """
    # only on this exit path: start-up stays light
    from stalkd.engine.fastheap import IMPLEMENTATION as HEAP
    from stalkd.protocol.accel import IMPLEMENTATION

    hot = "C accelerator" if IMPLEMENTATION == "c" else "pure Python"
    return (f"{VERSION_TEXT}hot path: {hot} (stalkd.protocol.accel.IMPLEMENTATION={IMPLEMENTATION!r}, "
            f"stalkd.engine.fastheap.IMPLEMENTATION={HEAP!r})\n")

USAGE = """\
Use: stalkd serve [OPTIONS]      (beanstalkd's flags; also installed as stalkd-server)

Options:
 -b DIR   --dir DIR           write-ahead log directory (without it: in memory only)
 -f MS    --fsync MS          fsync at most once every MS milliseconds;
                              use -f0 for "always fsync" (the default with -b)
 -F       --no-fsync          never fsync (survives kill -9, not power loss)
          --durability P      always | never | every:MS (same as -f0 / -F / -f MS)
 -l ADDR  --listen ADDR       listen on address (default is 127.0.0.1); unix:PATH for a
                              UNIX socket (a stale socket file is replaced)
 -p PORT  --port PORT         listen on port (default is 11300)
 -u USER  --user USER         become user and group
 -z BYTES --max-job-size N    set the maximum job size in bytes (default is 65535);
                              max allowed is 1073741824 bytes
 -s BYTES --wal-size N        set the size of each write-ahead log file
                              (default is 4194304); rounded up to a multiple of 4096
          --archive           keep WAL segments compaction retires: move them to
                              DIR/wal/archive/ instead of deleting them, so
                              `stalkd analyze DIR` sees the whole history (disk use grows)
          --archive URL       ship every sealed WAL segment and snapshot to URL (a
                              directory, s3://BUCKET/PREFIX, gs://, hdfs://) with a
                              manifest; `stalkd analyze URL` reads it. Segments are
                              deleted locally only once shipped. S3 settings come from
                              AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...
          --repair            if the WAL is damaged, cut it at the damage (the bytes cut
                              off are kept in DIR/wal/dropped/) instead of refusing to
                              start; same as running `stalkd log repair DIR` first
          --max-connections N refuse connections beyond N (default 10000)
          --max-output N      per-connection buffered reply bytes before the server stops
                              reading that connection (default 4194304)
          --log-level LEVEL   debug | info | warning | error (default info)

          --admin ADDR:PORT   serve the admin HTTP endpoint (metrics, health, JSON API,
                              dashboard) there, e.g. 127.0.0.1:11301 (port 0: any free
                              port, logged); off by default
          --admin-token-file FILE
                              clients of the admin endpoint must send this bearer token
                              (required when ADDR is not a loopback address)
          --admin-tls         serve the admin endpoint over HTTPS with --tls-cert/--tls-key
                              (with --tls-client-ca, clients need a certificate, and with
                              --acl only identities with admin = true may use the API)

Replication (see docs/standby.md):
          --standby-of ADDR   run as a hot standby of the primary at ADDR (host:port,
                              tls://host:port?ca=&cert=&key=, unix:PATH): copy its WAL,
                              answer reads, refuse changes with NOT_PRIMARY until
                              promoted (`stalkd promote`, or SIGUSR2); needs --dir
          --sync-standbys N   as primary, send INSERTED/DELETED/... only once N standbys
                              hold the change on disk (default 0: ship asynchronously)

Listeners (several may run at once; each has its own policy):
          --unix PATH         also listen on a UNIX socket (file permissions decide who
                              may connect; repeatable); removed when the server stops
          --socket-mode MODE  permissions of UNIX socket files, octal (default 0660)
          --tls-listen ADDR:PORT  also listen with TLS 1.2+ on ADDR:PORT (repeatable)
          --tls-cert FILE     server certificate (chain) in PEM, for --tls-listen
          --tls-key FILE      its private key (default: in --tls-cert's file)
          --tls-client-ca FILE  require a client certificate signed by these CAs; its
                              subject is the connection's identity (in the logs, the ACL)
          --acl FILE          per-identity rules for TLS clients (TOML: which tubes each
                              may put to and watch, whether it may kick and pause);
                              refused commands get PERMISSION_DENIED
          --no-plain          no plain -l/-p listener (only --unix and --tls-listen ones)
          --plain-network-ok  do not warn that the plain listener is on a network address
          (SIGHUP reloads the TLS certificate, key, client CAs and the ACL file)
 -c, -n                       accepted and ignored, as in beanstalkd
 -v       --version           show version information
 -V       --verbose           increase verbosity
 -h       --help              show this help
"""


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
                 "repair", "archive_url", "standby_of", "sync_standbys")  # fmt: skip
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
                 standby_of: str | None = None, sync_standbys: int = 0) -> None:  # fmt: skip
        values = (listen, port, data_dir, durability, wal_size, max_job_size, user, verbosity,
                  log_level, max_connections, max_output, warnings, archive, unix, socket_mode,
                  tls_listen, tls_cert, tls_key, tls_client_ca, acl, no_plain,
                  plain_network_ok, admin, admin_token_file, admin_tls, repair, archive_url,
                  standby_of, sync_standbys)  # fmt: skip
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


class _Bad(Exception):
    """A flag error: message for stderr, then usage, exit 5 (beanstalkd's ``usage(5)``)."""


def _size(flag: str, text: str) -> int:
    # beanstalkd's parse_size_t: an unsigned decimal and nothing after it.
    if not text.isdigit() or not text.isascii():
        raise _Bad(f"invalid size for {flag}: {text!r} (expected a non-negative integer)")
    return int(text)


def _port(flag: str, text: str) -> int:
    if not text.isdigit() or not text.isascii() or int(text) > 65535:
        raise _Bad(f"invalid port for {flag}: {text!r} (expected 0..65535)")
    return int(text)


def _durability(flag: str, text: str) -> str:
    if text in ("always", "never"):
        return text
    if text.startswith("every:") and text[6:].isdigit() and int(text[6:]) > 0:
        return text
    raise _Bad(f"invalid value for {flag}: {text!r} (expected always, never or every:<ms>)")


def _fsync_ms(flag: str, text: str) -> str:
    ms = _size(flag, text)
    return "always" if ms == 0 else f"every:{ms}"


def _log_level(flag: str, text: str) -> str:
    if text.lower() not in LOG_LEVELS:
        raise _Bad(f"invalid value for {flag}: {text!r} (expected one of {', '.join(LOG_LEVELS)})")
    return text.lower()


def _positive(flag: str, text: str) -> int:
    n = _size(flag, text)
    if n < 1:
        raise _Bad(f"invalid value for {flag}: {text!r} (must be at least 1)")
    return n


def _host_port(flag: str, text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` (port 0: any free port, logged once bound)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host:
        raise _Bad(f"invalid address for {flag}: {text!r} (expected HOST:PORT, e.g. 0.0.0.0:11400)")
    return host, _port(flag, port)


def _mode(flag: str, text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise _Bad(f"invalid mode for {flag}: {text!r} (expected octal permission bits, e.g. 0660)")
    return mode


def _file(flag: str, text: str) -> str:
    if not text:
        raise _Bad(f"empty file name for {flag}")
    return text



def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (the admin endpoint needs no token there).

    >>> is_loopback("127.0.0.2"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    if host == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback  # fe80::1%eth0: scope
    except ValueError:
        return False


def _set(cfg: Config, key: str, flag: str, value: str) -> Config:
    """Apply one valued option (short or long)."""
    if key == "unix":
        return cfg.replace(unix=(*cfg.unix, _file(flag, value)))
    if key == "socket-mode":
        return cfg.replace(socket_mode=_mode(flag, value))
    if key == "tls-listen":
        return cfg.replace(tls_listen=(*cfg.tls_listen, _host_port(flag, value)))
    if key in ("tls-cert", "tls-key", "tls-client-ca", "acl"):
        return cfg.replace(**{key.replace("-", "_"): _file(flag, value)})
    if key == "listen":
        if not value:
            raise _Bad(f"empty address for {flag}")
        return cfg.replace(listen=value)
    if key == "port":
        return cfg.replace(port=_port(flag, value))
    if key == "dir":
        if not value:
            raise _Bad(f"empty directory for {flag}")
        return cfg.replace(data_dir=value)
    if key == "fsync":
        return cfg.replace(durability=_fsync_ms(flag, value))
    if key == "durability":
        return cfg.replace(durability=_durability(flag, value))
    if key == "user":
        return cfg.replace(user=value)
    if key == "max-job-size":
        n = _size(flag, value)
        if n > MAX_JOB_SIZE_LIMIT:
            msg = f"maximum job size was set to {n} which is larger than {MAX_JOB_SIZE_LIMIT}; using {MAX_JOB_SIZE_LIMIT}"
            return cfg.replace(max_job_size=MAX_JOB_SIZE_LIMIT, warnings=(*cfg.warnings, msg))
        return cfg.replace(max_job_size=n)
    if key == "wal-size":
        n = _size(flag, value)
        rounded = max(4096, -(-n // 4096) * 4096)
        return cfg.replace(wal_size=rounded)
    if key == "max-connections":
        return cfg.replace(max_connections=_positive(flag, value))
    if key == "max-output":
        return cfg.replace(max_output=_positive(flag, value))
    if key == "log-level":
        return cfg.replace(log_level=_log_level(flag, value))
    if key == "admin":
        return cfg.replace(admin=_host_port(flag, value))
    if key == "standby-of":
        from stalkd.client._address import parse_address

        try:
            parse_address(value)
        except ValueError as e:
            raise _Bad(f"{flag}: {e}") from None
        return cfg.replace(standby_of=value)
    if key == "sync-standbys":
        n = _size(flag, value)
        return cfg.replace(sync_standbys=n)
    if key == "admin-token-file":
        if not value:
            raise _Bad(f"empty file name for {flag}")
        return cfg.replace(admin_token_file=value)
    raise AssertionError(key)  # pragma: no cover - tables below only name keys handled above


# Single-letter flags taking a value -> option key (beanstalkd's EARGF letters).
_SHORT_VALUED = {"l": "listen", "p": "port", "b": "dir", "f": "fsync", "u": "user",
                 "z": "max-job-size", "s": "wal-size"}  # fmt: skip
_LONG_VALUED = {"listen", "port", "dir", "fsync", "durability", "user", "max-job-size",
                "wal-size", "max-connections", "max-output", "log-level", "unix", "socket-mode",
                "tls-listen", "tls-cert", "tls-key", "tls-client-ca", "acl",
                "admin", "admin-token-file", "standby-of", "sync-standbys"}  # fmt: skip
_REMOVED = "-{} flag was removed. binlog is always compacted."


def _flag(cfg: Config, letter: str) -> Config | Exit:
    """A single-letter flag without a value."""
    if letter == "F":
        return cfg.replace(durability="never")
    if letter == "V":
        return cfg.replace(verbosity=cfg.verbosity + 1)
    if letter in ("c", "n"):
        return cfg.replace(warnings=(*cfg.warnings, _REMOVED.format(letter)))
    if letter == "h":
        return Exit(0, stderr=USAGE)
    if letter == "v":
        return Exit(0, stdout=version_text())
    raise _Bad(f"unknown flag: -{letter}")


def _long(cfg: Config, arg: str, rest: list[str]) -> Config | Exit:
    name, eq, value = arg[2:].partition("=")
    if name in _LONG_VALUED:
        if not eq:
            if not rest:
                raise _Bad(f"flag --{name} requires an argument")
            value = rest.pop(0)
        return _set(cfg, name, f"--{name}", value)
    if name == "archive":
        # Bare: keep retired segments in DIR/wal/archive/. With a value (``=URL``, or a next
        # word that is not a flag; this parser takes no positional arguments): ship to URL.
        if not eq and rest and not rest[0].startswith("-"):
            value, eq = rest.pop(0), "="
        if not eq:
            return cfg.replace(archive=True)
        if not value:
            raise _Bad("empty URL for --archive")
        return cfg.replace(archive_url=value)
    if eq:
        raise _Bad(f"flag --{name} takes no value")
    if name == "repair":
        return cfg.replace(repair=True)
    if name == "no-plain":
        return cfg.replace(no_plain=True)
    if name == "admin-tls":
        return cfg.replace(admin_tls=True)
    if name == "plain-network-ok":
        return cfg.replace(plain_network_ok=True)
    simple = {"no-fsync": "F", "verbose": "V", "help": "h", "version": "v"}
    if name in simple:
        return _flag(cfg, simple[name])
    raise _Bad(f"unknown flag: --{name}")


def _parse(argv: Sequence[str]) -> Config | Exit:
    cfg = Config()
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg.startswith("--") and len(arg) > 2:
            got = _long(cfg, arg, rest)
            if isinstance(got, Exit):
                return got
            cfg = got
            continue
        if not arg.startswith("-") or arg == "-":
            raise _Bad(f"unknown argument: {arg}")
        i = 1
        while i < len(arg):
            letter = arg[i]
            i += 1
            if letter in _SHORT_VALUED:
                # Like beanstalkd's EARGF: the rest of this word, or else the next word.
                if i < len(arg):
                    value, i = arg[i:], len(arg)
                elif rest:
                    value = rest.pop(0)
                else:
                    raise _Bad(f"flag -{letter} requires an argument")
                cfg = _set(cfg, _SHORT_VALUED[letter], f"-{letter}", value)
                continue
            got = _flag(cfg, letter)
            if isinstance(got, Exit):
                return got
            cfg = got
    if cfg.unix_path == "":
        raise _Bad("empty UNIX socket path in -l unix:")
    if cfg.archive_url is not None and cfg.data_dir is None:
        raise _Bad("--archive URL needs a data directory (-b DIR): it ships the WAL's segments")
    if cfg.tls_listen and cfg.tls_cert is None:
        raise _Bad("--tls-listen needs --tls-cert FILE (and --tls-key FILE unless the key is in it)")
    if cfg.admin_tls and (cfg.admin is None or cfg.tls_cert is None):
        raise _Bad("--admin-tls needs --admin ADDR:PORT and --tls-cert FILE")
    if not cfg.tls_listen and not cfg.admin_tls:
        stray = [f for f, v in (("--tls-cert", cfg.tls_cert), ("--tls-key", cfg.tls_key),
                                ("--tls-client-ca", cfg.tls_client_ca), ("--acl", cfg.acl)) if v]
        if stray:
            raise _Bad(f"{', '.join(stray)}: only for TLS listeners; add --tls-listen ADDR:PORT")
    if cfg.no_plain and not (cfg.unix or cfg.tls_listen):
        raise _Bad("--no-plain leaves no listener: add --unix PATH or --tls-listen ADDR:PORT")
    if cfg.admin is not None and cfg.admin_token_file is None and not is_loopback(cfg.admin[0]):
        raise _Bad(f"--admin {cfg.admin[0]} is not a loopback address: anyone who reaches it could "
                   "delete every job; give --admin-token-file FILE (a bearer token) as well")
    if cfg.admin_token_file is not None and cfg.admin is None:
        raise _Bad("--admin-token-file needs --admin ADDR:PORT")
    if (cfg.standby_of is not None or cfg.sync_standbys) and cfg.data_dir is None:
        raise _Bad("--standby-of and --sync-standbys need a data directory (--dir DIR): "
                   "replication ships the WAL")
    return cfg


def parse_args(argv: Sequence[str]) -> Config | Exit:
    """Parse beanstalkd-style arguments (without the program name).

    >>> parse_args(["-VV", "-z", "10"]).verbosity, parse_args(["-z10"]).max_job_size
    (2, 10)
    >>> parse_args(["--listen=unix:/tmp/s"]).unix_path
    '/tmp/s'
    """
    try:
        return _parse(argv)
    except _Bad as e:
        return Exit(5, stderr=f"stalkd: {e}\n{USAGE}")
