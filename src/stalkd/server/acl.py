"""Who may do what on a TLS listener: per-identity rules from a small TOML file (``--acl FILE``).

An identity is the subject of the client's certificate, written as
``openssl x509 -noout -subject -nameopt RFC2253`` prints it (``CN=worker-1,O=Example``).
The file says what each identity serves, by role, and stalkd grants what the role needs
underneath (docs/access-control.md lists every grant)::

    [identity."CN=producer,O=Example"]
    producer = ["emails", "reports.*"]     # put; follow its jobs: status, result, cancel

    [identity."CN=worker-*,O=Example"]     # a key may be a pattern too (per RDN, see below)
    worker = ["emails"]                    # reserve and finish; dead-letter, cancel, results

    [identity."CN=ops,O=Example"]
    admin = true                           # everything: every tube, kick, pause, the admin API

    [identity."CN=standby-*,O=Example"]
    replicate = true                       # may stream the WAL (stalkd serve --standby-of)

    [default]                              # anyone else who passed the TLS handshake
    watch = ["public.*"]

The plain verbs stay as they were: ``put = [...]`` (tubes it may put into) and ``watch = [...]``
(watch/reserve/delete/bury/release/touch/peek), with nothing granted underneath.

An exact key wins over the patterns, which are tried in file order. A pattern matches a
subject RDN by RDN, in order: ``CN=worker-*,O=Example`` matches ``CN=worker-1,O=Example`` but
not ``CN=worker-1,O=Partner,O=Example`` nor ``O=Example,CN=worker-1`` (a ``*`` never spans a
``,`` or a ``+``; the values of a multi-valued RDN match in any order). An identity nothing
matches (and no ``[default]``) may only run the commands that change and reveal nothing:
``use``, ``ignore``, ``list-tube-used``, ``list-tubes-watched``, ``stats``, ``quit``, and
``list-tubes`` (which shows it no tube).

Ensures: a refused command changes nothing and gets ``PERMISSION_DENIED``; the decision uses
only the command, the tubes this connection uses and watches (tracked here from the commands
admitted, so the engine is never asked), and the tube of the job a command names
(``tube_of``: the job's tube while it lives, then its result's while that is kept). A job that
does not exist is admitted, so the engine answers NOT_FOUND as usual. Only TLS listeners with an
ACL consult this; the plain listener is unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from stalkd.protocol import commands as C
from stalkd.protocol.commands import Reply
from stalkd.tubes import (
    CANCEL_IDLE_TUBE,
    CANCEL_TUBE_PREFIX,
    FAILED_TUBE,
    INTERNAL_PREFIX,
    KEY_TUBE_PREFIX,
    LIMIT_TUBE_PREFIX,
    WAIT_TUBE_PREFIX,
    WAKE_TUBE_PREFIX,
    WORKERS_TUBE_PREFIX,
)

__all__ = ["Acl", "Rules", "ConnPolicy", "AclError", "load_acl", "DENIED", "Verb", "dn_matches"]

DENIED = Reply("PERMISSION_DENIED")


class Verb(enum.Enum):
    """What a command does to a tube, as the rules grant it."""

    PUT = "put"          # put into it
    WATCH = "watch"      # watch and reserve from it; release, bury, touch its jobs; result-put
    FOLLOW = "follow"    # read and delete its jobs: peek*, stats-job, delete, result-get
    KICK = "kick"        # kick-job one of its jobs (a worker waking a job that waited on a key)
    SEE = "see"          # its name in list-tubes, stats-tube


# Commands naming a job, by what they do to the job's tube.
_JOB_VERB: dict[type, Verb] = {
    C.Release: Verb.WATCH, C.Bury: Verb.WATCH, C.Touch: Verb.WATCH, C.ReserveJob: Verb.WATCH,
    C.ResultPut: Verb.WATCH,
    C.Delete: Verb.FOLLOW, C.Peek: Verb.FOLLOW, C.StatsJob: Verb.FOLLOW, C.ResultGet: Verb.FOLLOW,
    C.KickJob: Verb.KICK,
}  # fmt: skip
_PEEK_USED = (C.PeekReady, C.PeekDelayed, C.PeekBuried)
_ADMIN = (C.Kick, C.PauseTube)

# What each role is granted on the tubes it serves, and on stalkd's own tubes underneath
# (stalkd.tubes names them). Written once here; docs/access-control.md shows the same table.
_SERVED = {
    "worker": frozenset({Verb.PUT, Verb.WATCH, Verb.FOLLOW, Verb.KICK, Verb.SEE}),
    "producer": frozenset({Verb.PUT, Verb.FOLLOW, Verb.SEE}),
}
_CANCEL = {  # stalkd.cancel.<job id>: for the roles serving that job's tube
    "worker": frozenset({Verb.WATCH, Verb.FOLLOW, Verb.SEE}),
    "producer": frozenset({Verb.PUT, Verb.FOLLOW, Verb.SEE}),
}
_INTERNAL: tuple[tuple[str, bool, Mapping[str, frozenset[Verb]]], ...] = (
    # (name or prefix, is a prefix, grants by role), tried in order
    (FAILED_TUBE, False, {"worker": frozenset({Verb.PUT, Verb.SEE})}),
    (CANCEL_IDLE_TUBE, False, {"worker": frozenset({Verb.WATCH, Verb.SEE})}),
    (WAKE_TUBE_PREFIX, True, {"worker": frozenset({Verb.PUT, Verb.WATCH, Verb.FOLLOW, Verb.SEE}),
                              "producer": frozenset({Verb.PUT, Verb.FOLLOW, Verb.SEE})}),
    (KEY_TUBE_PREFIX, True, {"worker": frozenset({Verb.PUT, Verb.FOLLOW, Verb.SEE}),
                             "producer": frozenset({Verb.PUT, Verb.FOLLOW, Verb.SEE})}),
    (WAIT_TUBE_PREFIX, True, {"worker": frozenset({Verb.PUT, Verb.FOLLOW, Verb.SEE}),
                              "producer": frozenset({Verb.PUT, Verb.FOLLOW, Verb.SEE})}),
    (LIMIT_TUBE_PREFIX, True, {"worker": frozenset({Verb.PUT, Verb.WATCH, Verb.FOLLOW, Verb.SEE})}),
    (WORKERS_TUBE_PREFIX, True, {"worker": frozenset({Verb.PUT, Verb.WATCH, Verb.FOLLOW, Verb.SEE})}),
)  # fmt: skip


class AclError(ValueError):
    """The ACL file cannot be used; the message names the file and the entry."""


def _any(tube: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(tube, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class Rules:
    """What one identity may do: plain verbs (``put``, ``watch``), roles (``worker``,
    ``producer``: the tubes served) and flags.

    >>> r = Rules(worker=("emails",))
    >>> r.allows(Verb.WATCH, "emails"), r.allows(Verb.PUT, "stalkd.failed"), r.allows(Verb.WATCH, "stalkd.failed")
    (True, True, False)
    """

    put: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    admin: bool = False
    replicate: bool = False
    worker: tuple[str, ...] = ()
    producer: tuple[str, ...] = ()

    def may_put(self, tube: str) -> bool:
        return self.allows(Verb.PUT, tube)

    def may_watch(self, tube: str) -> bool:
        return self.allows(Verb.WATCH, tube)

    def allows(self, verb: Verb, tube: str, tube_of: Callable[[int], str | None] = lambda _: None) -> bool:
        """Whether ``verb`` on ``tube`` is granted (``tube_of``: a job's tube, for the cancel
        tubes, which belong to the tube of the job they name)."""
        if self.admin:
            return True
        if verb is Verb.PUT and _any(tube, self.put):
            return True
        if verb in (Verb.WATCH, Verb.FOLLOW) and _any(tube, self.watch):
            return True
        if verb is Verb.SEE and (_any(tube, self.put) or _any(tube, self.watch)):
            return True
        if not tube.startswith(INTERNAL_PREFIX):
            return any(verb in _SERVED[role] and _any(tube, served) for role, served in self._roles())
        return self._internal(verb, tube, tube_of)

    def _roles(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return tuple((role, served) for role, served in (("worker", self.worker), ("producer", self.producer))
                     if served)

    def _internal(self, verb: Verb, tube: str, tube_of: Callable[[int], str | None]) -> bool:
        roles = self._roles()
        for name, prefix, grants in _INTERNAL:
            if tube == name or (prefix and tube.startswith(name)):
                return any(verb in grants.get(role, ()) for role, _ in roles)
        if tube.startswith(CANCEL_TUBE_PREFIX) and tube[len(CANCEL_TUBE_PREFIX):].isdigit():
            served_tube = tube_of(int(tube[len(CANCEL_TUBE_PREFIX):]))
            # a job that is gone leaves only markers naming its id: any role may clear them
            return any(verb in _CANCEL[role] and (served_tube is None or _any(served_tube, served))
                       for role, served in roles)
        return False


NOTHING = Rules()


def _split(dn: str, sep: str) -> list[str]:
    """``dn`` cut at each ``sep`` not escaped by a backslash (RFC 4514)."""
    parts, cur, i = [], [], 0
    while i < len(dn):
        ch = dn[i]
        if ch == "\\" and i + 1 < len(dn):
            cur.append(dn[i:i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def dn_matches(subject: str, pattern: str) -> bool:
    """Whether the subject ``subject`` matches ``pattern``, RDN by RDN in order: a glob never
    spans a ``,`` (nor a ``+``), and the values of a multi-valued RDN match in any order.

    >>> dn_matches("CN=worker-1,O=Example", "CN=worker-*,O=Example")
    True
    >>> dn_matches("CN=worker-evil,O=Partner,O=Example", "CN=worker-*,O=Example")
    False
    >>> dn_matches("UID=7+CN=worker-1,O=Example", "CN=worker-*+UID=7,O=Example")
    True
    """
    rdns, wanted = _split(subject, ","), _split(pattern, ",")
    if len(rdns) != len(wanted):
        return False
    for rdn, want in zip(rdns, wanted, strict=True):
        avas, pats = sorted(_split(rdn, "+")), sorted(_split(want, "+"))
        if len(avas) != len(pats):
            return False
        if not _pairs(avas, pats):
            return False
    return True


def _pairs(avas: list[str], pats: list[str]) -> bool:
    """Whether each AVA matches a distinct pattern (tiny lists: try every pairing)."""
    if not avas:
        return True
    first = avas[0]
    return any(fnmatchcase(first, p) and _pairs(avas[1:], pats[:i] + pats[i + 1:])
               for i, p in enumerate(pats))


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
                if dn_matches(identity, pattern):
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


_LISTS = ("put", "watch", "worker", "producer")
_FLAGS = ("admin", "replicate")


def _rules(entry: object, where: str) -> Rules:
    known = ", ".join(_LISTS + _FLAGS)
    if not isinstance(entry, dict):
        raise AclError(f"{where}: expected a table with some of {known}")
    unknown = set(entry) - set(_LISTS) - set(_FLAGS)
    if unknown:
        raise AclError(f"{where}: unknown key(s) {sorted(unknown)} (known: {known})")
    lists: dict[str, tuple[str, ...]] = {}
    for key in _LISTS:
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise AclError(f"{where}: {key} must be a list of tube names or glob patterns")
        lists[key] = tuple(value)
    flags = {}
    for key in _FLAGS:
        flags[key] = entry.get(key, False)
        if not isinstance(flags[key], bool):
            raise AclError(f"{where}: {key} must be true or false")
    return Rules(lists["put"], lists["watch"], flags["admin"], flags["replicate"],
                 lists["worker"], lists["producer"])


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

    __slots__ = ("_acl", "identity", "_tube_of", "_using", "_watching", "_picked")

    def __init__(self, acl: Callable[[], Acl], identity: str | None,
                 tube_of: Callable[[int], str | None]) -> None:
        self._acl = acl
        self.identity = identity
        self._tube_of = tube_of
        self._using = "default"
        self._watching = ["default"]
        self._picked: tuple[Acl, Rules] | None = None  # the entry of the ACL last asked

    def _entry(self) -> Rules:
        """This identity's entry in the current ACL (picked once per ACL, not per command)."""
        acl, picked = self._acl(), self._picked
        if picked is None or picked[0] is not acl:
            picked = self._picked = (acl, acl.rules_for(self.identity))
        return picked[1]

    def may_replicate(self) -> bool:
        """Whether this connection may stream the WAL as a standby (``replicate = true``)."""
        return self._entry().replicate

    def revoked(self, before: Acl) -> str | None:
        """Why this connection no longer passes the ACL now that it replaced ``before`` (a
        reload); None if it still does."""
        now, then = self._entry(), before.rules_for(self.identity)
        if now == NOTHING and then != NOTHING:
            return "the ACL no longer grants its identity anything"
        lost = [t for t in self._watching if t != "default" and then.allows(Verb.WATCH, t, self._tube_of)
                and not now.allows(Verb.WATCH, t, self._tube_of)]
        return f"the ACL no longer lets it watch {', '.join(lost)}" if lost else None

    def shows(self, tube: str) -> bool:
        """Whether ``list-tubes`` shows this connection ``tube``."""
        return self._entry().allows(Verb.SEE, tube, self._tube_of)

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
        rules = self._entry()
        tube_of = self._tube_of
        if kind is C.Put:
            return cmd.error is not None or rules.allows(Verb.PUT, self._using, tube_of)  # type: ignore[attr-defined]
        if kind is C.Watch:
            tube = cmd.tube  # type: ignore[attr-defined]
            if not rules.allows(Verb.WATCH, tube, tube_of):
                return False
            if tube not in self._watching:
                self._watching.append(tube)
            return True
        if kind is C.Reserve or kind is C.ReserveWithTimeout:
            return all(rules.allows(Verb.WATCH, t, tube_of) for t in self._watching)
        verb = _JOB_VERB.get(kind)
        if verb is not None:
            tube = tube_of(cmd.id)  # type: ignore[attr-defined]
            return tube is None or rules.allows(verb, tube, tube_of)
        if kind in _PEEK_USED:
            return rules.allows(Verb.FOLLOW, self._using, tube_of)
        if kind is C.StatsTube:
            return rules.allows(Verb.SEE, cmd.tube, tube_of)  # type: ignore[attr-defined]
        if kind in _ADMIN:
            return rules.admin
        return True  # use, ignore, list-*, stats, quit: change and reveal nothing of others
