"""``stalkd serve`` imports only what its command line uses: a server started without --admin,
--tls-*/--acl, --archive or --ha never loads those modules (nor aiohttp, TOML, Spark or etcd's
client), and one in memory not even the log, WAL or snapshot stack. What serving uses only later,
if ever (ctypes for memtrim's first tick, hashlib/hmac for a replication secret, json for a
replication state file, pathlib for a path a person typed, the snapshot blocks' readers and
writers in a directory without a snapshot yet), is not imported before the first reply either;
with ``-u`` it is, before the switch of user.

The server runs as a real process with ``PYTHONPROFILEIMPORTTIME=1``: CPython then reports every
module it imports on stderr, which is the server's log file here. Nothing is timed; only the names
of the modules imported by the time the first command has been answered are checked.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pwd
import re
import socket
import tempfile
import types
import typing
from pathlib import Path

import pytest

from server.proc import start_stalkd
from stalkd.extensions import extensions_disabled
from stalkd.protocol.accel import IMPLEMENTATION

# Modules of features whose flags are absent (prefixes: a package covers its submodules).
NOT_WITHOUT_FLAGS = ("stalkd.admin", "aiohttp", "stalkd.server.tls", "stalkd.server.acl", "tomllib",
                     "stalkd.archive", "stalkd.spark", "pyspark", "stalkd.ha", "stalkd.server.hanode",
                     "stalkd.server.handshake", "stalkd.server.handshakelog", "stalkd.server.recheck")
# What only a data directory needs (a server in memory makes its role, a primary's, when stats
# first asks: the epochs' module and the replay it imports stay out).
ONLY_WITH_A_DIRECTORY = ("stalkd.log", "stalkd.persist.wal", "stalkd.persist.snapshot", "crc32c",
                         "stalkd.replication.sender", "stalkd.replication.standby", "stalkd.replication.role",
                         "stalkd.replication.epochs", "stalkd.replication.status", "stalkd.engine.replay")

# What only the pure-Python switch (STALKD_NO_EXTENSIONS=1) needs: its import hook is an
# ``importlib.abc`` finder, whose import drags in ``importlib.resources`` and, through it,
# ``tempfile``, ``shutil`` and the compression modules.
ONLY_FOR_THE_SWITCH = ("importlib.abc", "importlib.resources", "tempfile", "shutil", "lzma", "bz2")

# Imported on first use, after the first reply (and before it only for -u).
FIRST_USE = ("ctypes", "hashlib", "hmac", "json", "stalkd.persist.snap_v1", "stalkd.persist.snap_v2",
             "stalkd.persist.snapjobs")
# Never by a server: the log's consumer groups (its WAL has none); pathlib (stalkd.log.layout's,
# for a path a person typed) and, through it, urllib.parse and ipaddress. The pure-Python
# switch's import hook loads those three all the same (importlib.resources imports pathlib).
NOT_BY_A_SERVER = ("stalkd.log.group", "stalkd.log.groupapi", "stalkd.log.grouplag", "stalkd.log.cursor",
                   *(() if extensions_disabled() else ("pathlib", "urllib", "ipaddress")))
# Not before the first reply, on either build: ``dataclasses`` (with ``copy``), whose import and
# whose fields a dataclass's definition costs (engine.model's Record makes its dataclass fields
# when first asked for; the protocol's values raise its FrozenInstanceError when assigned to).
NOT_BEFORE_THE_FIRST_REPLY = ("dataclasses",)

_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.MULTILINE)


def _imported_after_first_reply(*flags: str, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The modules imported by the time the first reply came: a timer set at start (memtrim's
    first tick, a second later) may import more, but not before the reply (the loop runs the
    command first), and the server is stopped once it has replied."""
    return set(_IMPORT_LINE.findall(_log_to_first_reply(*flags, monkeypatch=monkeypatch)))


def _log_to_first_reply(*flags: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's log (its stderr, with CPython's import report) up to its first reply."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # the child's environment, read at its start
    server = start_stalkd(*flags)
    try:
        with socket.create_connection((server.host, server.port), timeout=30) as s:
            s.sendall(b"list-tube-used\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(100)
                assert chunk, "the server closed the connection before replying"
                reply += chunk
        assert reply == b"USING default\r\n"
    finally:
        server.stop()
    log = server.log_text()
    assert "stalkd.node.serve" in set(_IMPORT_LINE.findall(log)), "no import report in the server's log"
    return log


def _under(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_in_memory_imports_no_storage_and_no_optional_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = _imported_after_first_reply(monkeypatch=monkeypatch)
    assert _under(modules, NOT_WITHOUT_FLAGS) == []
    assert _under(modules, ONLY_WITH_A_DIRECTORY) == []
    assert _under(modules, FIRST_USE + NOT_BY_A_SERVER + NOT_BEFORE_THE_FIRST_REPLY) == []
    # -l 127.0.0.1 is resolved as bytes: no IDNA codec (stringprep, unicodedata) for an ASCII name
    assert _under(modules, ("encodings.idna", "stringprep", "unicodedata")) == []


def test_empty_directory_imports_no_optional_feature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules = _imported_after_first_reply("-b", str(tmp_path / "data"), monkeypatch=monkeypatch)
    assert _under(modules, NOT_WITHOUT_FLAGS) == []
    assert "stalkd.persist.wal" in modules  # the directory is served durably: the check sees imports
    # CRC-32C is loaded without its package's __init__ (``stalkd.log.crc``), which would ask
    # importlib.metadata for its version; ``find_library`` (ldconfig, shutil) is not called.
    assert _under(modules, ("importlib.metadata", "ctypes.util")) == []
    assert _under(modules, FIRST_USE + NOT_BY_A_SERVER + NOT_BEFORE_THE_FIRST_REPLY) == []


# Value classes on a data directory's way to its first reply are ``stalkd.values.Value``s: a
# dataclass compiles its methods from source when its module is imported (a frozen one costs
# about as much as a small module's import).
NO_DATACLASSES_UNDER = ("stalkd.log", "stalkd.persist", "stalkd.replication", "stalkd.server", "stalkd.node",
                        "stalkd.protocol", "stalkd.engine.state")


def test_empty_directory_start_defines_no_dataclass_in_its_storage_server_protocol_or_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    modules = _imported_after_first_reply("-b", str(tmp_path / "data"), monkeypatch=monkeypatch)
    defined = [f"{name}.{attr}" for name in _under(modules, NO_DATACLASSES_UNDER)
               for attr, obj in vars(importlib.import_module(name)).items()
               if isinstance(obj, type) and obj.__module__ == name and dataclasses.is_dataclass(obj)]  # fmt: skip
    assert defined == []


@pytest.mark.skipif(IMPLEMENTATION != "c", reason="the C parser is not active: the Python one reads the lines")
@pytest.mark.parametrize("where", ["memory", "empty directory"])
def test_with_the_c_parser_the_python_parser_is_not_imported(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # Its tables (lines.FAST1, SPACED...) and put's constructors are that parser's alone; the C
    # parser is given the grammar's table and protocol.markers' objects.
    modules = _imported_after_first_reply(*([] if where == "memory" else ["-b", str(tmp_path / "data")]),
                                          monkeypatch=monkeypatch)  # fmt: skip
    assert _under(modules, ("stalkd.protocol.parser", "stalkd.protocol.lines", "stalkd.protocol.constructors")) == []
    assert "stalkd.protocol.markers" in modules


def _typing_alias(obj: object) -> bool:
    """A subscripted typing form (``Literal[...]``, ``Callable[...]``, ``dict[str, int]``) or a
    TypeVar: typing's Python code makes each (a Literal's de-duplication and cache, a Callable's
    argument checks); a union of classes (``A | B``) is made by C and not counted."""
    return isinstance(obj, typing.TypeVar) or typing.get_origin(obj) not in (None, types.UnionType)


def test_the_protocol_makes_no_typing_alias_at_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its aliases (grammar.ArgKind, parser.Item...) are the type checker's (TYPE_CHECKING): at run
    # time plain types, or no name at all where only annotations use them.
    modules = _imported_after_first_reply("-b", str(tmp_path / "data"), monkeypatch=monkeypatch)
    made = [f"{name}.{attr}" for name in _under(modules, ("stalkd.protocol",))
            for attr, obj in vars(importlib.import_module(name)).items() if _typing_alias(obj)]  # fmt: skip
    assert made == []


# Loaded by the server's interpreter at start (``site`` imports ``sitecustomize``): names on stderr
# the stalkd module of each ``re.compile`` call (a regex compiled at import costs more than a
# small module's import; the protocol's are compiled when a line first needs them).
_REGEX_HOOK = """\
import re, sys
_compile = re.compile
def _named(pattern, flags=0):
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller.startswith("stalkd"):
        sys.stderr.write("regex compiled by %s\\n" % (caller,))
    return _compile(pattern, flags)
re.compile = _named
sys.stderr.write("regex hook loaded\\n")
"""
_REGEX_COMPILED = re.compile(r"^regex compiled by (\S+)$", re.MULTILINE)


def _with_hook(hook: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(hook)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(hook_dir), os.environ.get("PYTHONPATH", "")) if p))


@pytest.mark.parametrize("where", ["memory", "empty directory"])
def test_the_protocol_compiles_no_regex_before_the_first_reply(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # The C parser reads the lines it is given; the Python one reads canonical lines (the first
    # reply's among them) by table look-ups: neither needs the grammar's regexes at start.
    _with_hook(_REGEX_HOOK, tmp_path, monkeypatch)
    log = _log_to_first_reply(*([] if where == "memory" else ["-b", str(tmp_path / "data")]), monkeypatch=monkeypatch)
    assert "regex hook loaded" in log, "the server's interpreter did not load the hook"
    assert _under(set(_REGEX_COMPILED.findall(log)), ("stalkd.protocol",)) == []


# Loaded by the server's interpreter at start (``site`` imports ``sitecustomize`` from the path):
# an audit hook that names on stderr each module imported once the process runs as another user.
# CPython raises the "import" event only for a module not yet in ``sys.modules``.
_AFTER_SWITCH_HOOK = """\
import os, sys
def _after_switch(event, args):
    if event == "import" and os.geteuid() != 0:
        sys.stderr.write("imported after the switch of user: %s\\n" % (args[0],))
sys.addaudithook(_after_switch)
sys.stderr.write("after-switch hook loaded\\n")
"""
_AFTER_SWITCH = re.compile(r"^imported after the switch of user: (\S+)$", re.MULTILINE)


@pytest.mark.skipif(os.geteuid() != 0, reason="-u needs root")
def test_with_a_user_to_become_what_is_used_later_is_imported_before_the_switch(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # The new user may be unable to read the Python installation or stalkd's own tree (CI's
    # clone lives in a 0700 directory): a module imported after the switch then kills the
    # server (test_user.py). The hook names such imports wherever the tree lives, readable or not.
    nobody = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory() as tmp:  # not pytest's tmp_path, which nobody cannot enter
        data = Path(tmp) / "data"
        data.mkdir()
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
        os.chmod(tmp, 0o755)
        hook_dir = Path(tmp) / "hook"
        hook_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(_AFTER_SWITCH_HOOK)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (str(hook_dir), os.environ.get("PYTHONPATH", "")) if p))
        log = _log_to_first_reply("-u", "nobody", "-b", str(data), monkeypatch=monkeypatch)
    assert set(FIRST_USE) <= set(_IMPORT_LINE.findall(log))
    assert "after-switch hook loaded" in log, "the server's interpreter did not load the hook"
    assert _AFTER_SWITCH.findall(log) == []


@pytest.mark.skipif(extensions_disabled(), reason="the pure-Python switch is on: its import hook is loaded")
def test_no_import_hook_machinery_without_the_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _under(_imported_after_first_reply(monkeypatch=monkeypatch), ONLY_FOR_THE_SWITCH) == []
    empty = _imported_after_first_reply("-b", str(tmp_path / "data"), monkeypatch=monkeypatch)
    assert _under(empty, ONLY_FOR_THE_SWITCH) == []
