"""Who may do what on a TLS listener: per-identity rules from a small TOML file (``--acl FILE``).

An identity is the subject of the client's certificate, written as
``openssl x509 -noout -subject -nameopt RFC2253`` prints it (``CN=worker-1,O=Example``).
The file::

    [identity."CN=producer,O=Example"]
    put = ["emails", "reports.*"]          # tubes (glob patterns) it may put into

    [identity."CN=worker-*,O=Example"]     # a key may be a glob pattern too
    watch = ["emails"]                     # watch/reserve/delete/bury/release/touch/peek

    [identity."CN=ops,O=Example"]
    put = ["*"]
    watch = ["*"]
    admin = true                           # kick, kick-job, pause-tube, the admin API

    [identity."CN=standby-*,O=Example"]
    replicate = true                       # may stream the WAL (stalkd serve --standby-of)

    [default]                              # anyone else who passed the TLS handshake
    watch = ["public.*"]

An exact key wins over the patterns, which are tried in file order; an identity nothing
matches (and no ``[default]``) may only run the commands that change and reveal nothing:
``use``, ``ignore``, ``list-*``, ``stats``, ``stats-tube``, ``quit``.

Ensures: a refused command changes nothing and gets ``PERMISSION_DENIED``; the decision uses
only the command, the tubes this connection uses and watches (tracked here from the commands
admitted, so the engine is never asked), and the tube of the job a command names
(``tube_of``). A job that does not exist is admitted, so the engine answers NOT_FOUND as
usual. Only TLS listeners with an ACL consult this; the plain listener is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from stalkd.protocol import commands as C
from stalkd.protocol.commands import Reply

__all__ = ["Acl", "Rules", "ConnPolicy", "AclError", "load_acl", "DENIED"]

DENIED = Reply("PERMISSION_DENIED")

# Commands that need the connection's watch rights on the tube of the job they name.
_JOB_WATCH = (C.Delete, C.Release, C.Bury, C.Touch, C.Peek, C.StatsJob, C.ReserveJob,
              C.ResultPut, C.ResultGet)  # a result: by its job's tube while the job lives
_PEEK_USED = (C.PeekReady, C.PeekDelayed, C.PeekBuried)
_ADMIN = (C.Kick, C.KickJob, C.PauseTube)


class AclError(ValueError):
    """The ACL file cannot be used; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class Rules:
    """What one identity may do."""

    put: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    admin: bool = False
    replicate: bool = False

    def may_put(self, tube: str) -> bool:
        return any(fnmatchcase(tube, p) for p in self.put)

    def may_watch(self, tube: str) -> bool:
        return any(fnmatchcase(tube, p) for p in self.watch)


NOTHING = Rules()


@dataclass(frozen=True, slots=True)
class Acl:
    """Parsed rules. ``rules_for(identity)`` picks the entry; ``may_admin`` is the check the
    admin API uses.

    >>> acl = Acl.from_toml({"identity": {"CN=ops": {"admin": True}}})
    >>> acl.may_admin("CN=ops"), acl.may_admin("CN=eve"), acl.may_admin(None)
    (True, False, False)
    """

    exact: Mapping[str, Rules]
    patterns: tuple[tuple[str, Rules], ...]
    default: Rules = NOTHING
    source: str = "<acl>"

    def rules_for(self, identity: str | None) -> Rules:
        if identity is not None:
            hit = self.exact.get(identity)
            if hit is not None:
                return hit
            for pattern, rules in self.patterns:
                if fnmatchcase(identity, pattern):
                    return rules
        return self.default

    def may_admin(self, identity: str | None) -> bool:
        """Whether ``identity`` (a certificate subject; None: no certificate) may run admin
        commands: kick, kick-job, pause-tube and the admin API."""
        return self.rules_for(identity).admin

    @classmethod
    def from_toml(cls, doc: Mapping[str, Any], source: str = "<acl>") -> Acl:
        unknown = set(doc) - {"identity", "default"}
        if unknown:
            raise AclError(f"{source}: unknown section(s) {sorted(unknown)}; expected [identity.\"SUBJECT\"] "
                           f"and [default]")
        idents = doc.get("identity", {})
        if not isinstance(idents, dict):
            raise AclError(f"{source}: 'identity' must be a table of [identity.\"SUBJECT\"] entries")
        exact: dict[str, Rules] = {}
        patterns: list[tuple[str, Rules]] = []
        for name, entry in idents.items():
            rules = _rules(entry, f"{source}: [identity.{name!r}]")
            if any(ch in name for ch in "*?["):
                patterns.append((name, rules))
            else:
                exact[name] = rules
        default = _rules(doc["default"], f"{source}: [default]") if "default" in doc else NOTHING
        return cls(exact, tuple(patterns), default, source)


def _rules(entry: object, where: str) -> Rules:
    if not isinstance(entry, dict):
        raise AclError(f"{where}: expected a table with put, watch and admin")
    unknown = set(entry) - {"put", "watch", "admin", "replicate"}
    if unknown:
        raise AclError(f"{where}: unknown key(s) {sorted(unknown)} (known: put, watch, admin, replicate)")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("put", "watch"):
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise AclError(f"{where}: {key} must be a list of tube names or glob patterns")
        lists[key] = tuple(value)
    flags = {}
    for key in ("admin", "replicate"):
        flags[key] = entry.get(key, False)
        if not isinstance(flags[key], bool):
            raise AclError(f"{where}: {key} must be true or false")
    return Rules(lists["put"], lists["watch"], flags["admin"], flags["replicate"])


def load_acl(path: str) -> Acl:
    """Read and check ``path``; :class:`AclError` says what is wrong and where."""
    import tomllib  # only with --acl: not on every server's start-up path

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise AclError(f"cannot read the ACL file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise AclError(f"{path}: not valid TOML: {e}") from None
    return Acl.from_toml(doc, path)


class ConnPolicy:
    """One connection's gate: consulted for every command before the server runs it.

    ``acl`` is a callable so a reload (SIGHUP) reaches open connections too.

    >>> acl = Acl.from_toml({"identity": {"CN=p": {"put": ["emails"]}}})
    >>> p = ConnPolicy(lambda: acl, "CN=p", tube_of=lambda job_id: None)
    >>> p.admits(C.Put(0, 0, 60, b"x")), p.admits(C.Use("emails")), p.admits(C.Put(0, 0, 60, b"x"))
    (False, True, True)
    """

    __slots__ = ("_acl", "identity", "_tube_of", "_using", "_watching")

    def __init__(self, acl: Callable[[], Acl], identity: str | None,
                 tube_of: Callable[[int], str | None]) -> None:
        self._acl = acl
        self.identity = identity
        self._tube_of = tube_of
        self._using = "default"
        self._watching = ["default"]

    def may_replicate(self) -> bool:
        """Whether this connection may stream the WAL as a standby (``replicate = true``)."""
        return self._acl().rules_for(self.identity).replicate

    def admits(self, cmd: object) -> bool:
        """Whether ``cmd`` may run; tracks ``use``/``watch``/``ignore`` it admits."""
        kind = type(cmd)
        if kind is C.Use:
            self._using = cmd.tube  # type: ignore[attr-defined]
            return True
        if kind is C.Ignore:
            tube = cmd.tube  # type: ignore[attr-defined]
            if tube in self._watching and len(self._watching) > 1:  # the last one stays (NOT_IGNORED)
                self._watching.remove(tube)
            return True
        rules = self._acl().rules_for(self.identity)
        if kind is C.Put:
            return cmd.error is not None or rules.may_put(self._using)  # type: ignore[attr-defined]
        if kind is C.Watch:
            tube = cmd.tube  # type: ignore[attr-defined]
            if not rules.may_watch(tube):
                return False
            if tube not in self._watching:
                self._watching.append(tube)
            return True
        if kind is C.Reserve or kind is C.ReserveWithTimeout:
            return all(rules.may_watch(t) for t in self._watching)
        if kind in _JOB_WATCH:
            tube = self._tube_of(cmd.id)  # type: ignore[attr-defined]
            return tube is None or rules.may_watch(tube)
        if kind in _PEEK_USED:
            return rules.may_watch(self._using)
        if kind in _ADMIN:
            return rules.admin
        return True  # use, ignore, list-*, stats, stats-tube, quit: change and reveal nothing
