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

This module imports nothing heavy: it runs before the listening socket is bound. The parse's
result, :class:`Config`, is defined in ``settings``, the help and version text in ``usage``;
both are re-exported here, where callers import them from.

Example:
    >>> parse_args(["-l", "127.0.0.1", "-p11301", "-b", "/tmp/q", "-f0"]).durability
    'always'
    >>> parse_args(["-x"]).code
    5
"""

from __future__ import annotations

import socket  # (imported at start-up anyway: asyncio's)
from collections.abc import Callable, Sequence  # collections.abc is imported at start-up anyway

from stalkd.server.settings import DEFAULT_PORT, Config, Exit
from stalkd.server.usage import BEANSTALKD_VERSION, USAGE, VERSION_TEXT, version_text

__all__ = [
    "Config", "Exit", "parse_args", "USAGE", "VERSION_TEXT", "version_text", "DEFAULT_PORT",
    "MAX_JOB_SIZE_LIMIT", "LOG_LEVELS", "is_loopback", "BEANSTALKD_VERSION",
]  # fmt: skip

MAX_JOB_SIZE_LIMIT = 1 << 30  # beanstalkd clamps -z to 1 GiB with a warning
LOG_LEVELS = ("debug", "info", "warning", "error")


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


_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def _memory(flag: str, text: str) -> int:
    """Bytes, or with a K, M or G suffix (powers of 1024): ``512M``."""
    digits, unit = (text[:-1], text[-1].lower()) if text[-1:].isalpha() else (text, "")
    if unit not in _UNITS or not digits.isdigit() or not digits.isascii() or int(digits) < 1:
        raise _Bad(f"invalid size for {flag}: {text!r} (expected bytes, or a number with K, M or G)")
    return int(digits) * _UNITS[unit]


def _seconds(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise _Bad(f"invalid value for {flag}: {text!r} (expected seconds, more than 0, at most 3600)")
    return value


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
    # 127.0.0.0/8 or ::1 (what ``ipaddress`` calls loopback), read from the address's bytes:
    # ``ipaddress`` takes ~1 ms to import, and every server asks this of its bound listeners
    # (``listen.is_loopback``) on the way to its first reply
    addr = host.partition("%")[0]  # fe80::1%eth0: the scope
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            packed = socket.inet_pton(family, addr)
        except OSError:
            continue
        return packed[0] == 127 if family == socket.AF_INET else packed == bytes(15) + b"\1"
    return False


def _parsed(flag: str, value: str, parse: Callable[[str], object]) -> str:
    """``value`` if ``parse`` accepts it (an address, say); else the flag error naming why."""
    try:
        parse(value)
    except ValueError as e:
        raise _Bad(f"{flag}: {e}") from None
    return value


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
    if key in _RESULT_LIMITS:
        limits: list[int | None] = list(cfg.result_limits)
        limits[_RESULT_LIMITS.index(key)] = _positive(flag, value)
        return cfg.replace(result_limits=tuple(limits))
    if key == "max-memory":
        return cfg.replace(max_memory=_memory(flag, value))
    if key == "max-handshakes-per-address":
        return cfg.replace(max_handshakes_per_address=_positive(flag, value))
    if key == "handshake-timeout":
        return cfg.replace(handshake_timeout=_seconds(flag, value))
    if key == "log-level":
        return cfg.replace(log_level=_log_level(flag, value))
    if key == "admin":
        return cfg.replace(admin=_host_port(flag, value))
    if key == "standby-of":
        from stalkd.client._address import parse_address

        return cfg.replace(standby_of=_parsed(flag, value, parse_address))
    if key == "sync-standbys":
        n = _size(flag, value)
        return cfg.replace(sync_standbys=n)
    if key == "replication-secret":
        return cfg.replace(replication_secret=_file(flag, value))
    if key == "ha":
        from stalkd.ha.address import parse_cluster  # light: dataclasses and urllib.parse

        return cfg.replace(ha=_parsed(flag, value, parse_cluster))
    if key == "name":
        if not value or not all(ch.isalnum() or ch in "-_." for ch in value):
            raise _Bad(f"invalid name for {flag}: {value!r} (letters, digits, '-', '_' and '.')")
        return cfg.replace(name=value)
    if key == "ha-ttl":
        n = _positive(flag, value)
        if n < 2:
            raise _Bad(f"invalid value for {flag}: {value!r} (at least 2 seconds)")
        return cfg.replace(ha_ttl=n)
    if key == "advertise":
        from stalkd.client._address import parse_address

        return cfg.replace(advertise=_parsed(flag, value, parse_address))
    if key == "admin-token-file":
        if not value:
            raise _Bad(f"empty file name for {flag}")
        return cfg.replace(admin_token_file=value)
    raise AssertionError(key)  # pragma: no cover - tables below only name keys handled above


# Single-letter flags taking a value -> option key (beanstalkd's EARGF letters).
_SHORT_VALUED = {"l": "listen", "p": "port", "b": "dir", "f": "fsync", "u": "user",
                 "z": "max-job-size", "s": "wal-size"}  # fmt: skip
_LONG_VALUED = {"listen", "port", "dir", "fsync", "durability", "user", "max-job-size",
                "wal-size", "max-connections", "max-output", "max-memory",
                "max-handshakes-per-address", "handshake-timeout", "log-level", "unix", "socket-mode",
                "tls-listen", "tls-cert", "tls-key", "tls-client-ca", "acl",
                "admin", "admin-token-file", "standby-of", "sync-standbys", "replication-secret",
                "ha", "name", "ha-ttl", "advertise",
                "max-results", "max-result-bytes", "max-result-ttl"}  # fmt: skip
_RESULT_LIMITS = ("max-results", "max-result-bytes", "max-result-ttl")  # Config.result_limits' order
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
    if cfg.max_memory is not None and cfg.max_memory < cfg.max_job_size + 2**20:
        raise _Bad(f"--max-memory {cfg.max_memory} leaves no room for a job of -z {cfg.max_job_size} "
                   f"bytes being received: give at least {cfg.max_job_size + 2**20}")
    if (cfg.standby_of is not None or cfg.sync_standbys or cfg.replication_secret) and cfg.data_dir is None:
        raise _Bad("--standby-of, --sync-standbys and --replication-secret need a data directory (--dir DIR): "
                   "replication ships the WAL")
    if cfg.ha is not None:
        if cfg.data_dir is None or cfg.name is None:
            raise _Bad("--ha needs --dir DIR and --name NODE: each node keeps its own log")
        if cfg.standby_of is not None:
            raise _Bad("--ha and --standby-of: with --ha the lease in etcd says whom to follow")
    elif cfg.name is not None or cfg.advertise is not None:
        raise _Bad("--name and --advertise are for a cluster node: add --ha etcd://HOST:PORT/stalkd/CLUSTER")
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
