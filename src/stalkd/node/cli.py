"""``stalkd serve`` and ``stalkd-server``: beanstalkd's command line, listening within milliseconds.

The order matters: parse flags, bind and listen on a raw socket, and only then import asyncio,
uvloop, the engine and the WAL and recover. A client that connects 0.1 s after exec finds the
port open; its commands run once recovery is done.

Example (shell)::

    stalkd serve --dir ./data              # durable (fsync before every acknowledgement)
    stalkd-server -l 127.0.0.1 -p 11300    # in memory, like `beanstalkd -l ... -p ...`
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Sequence

from stalkd.server.config import Config, Exit, parse_args
from stalkd.server.listen import ListenError, bind_all, from_systemd

__all__ = ["main", "beanstalkd_main"]

EXIT_LISTEN = 111  # beanstalkd's status when it cannot listen
EXIT_CONFIG = 1  # a TLS or ACL file cannot be used


def _become(user: str) -> str | None:
    """``-u USER``: drop to that user, its group and its supplementary groups. Returns an error
    message, or None."""
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return f"getpwnam(\"{user}\"): no such user"
    try:
        os.initgroups(user, pw.pw_gid)
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    except OSError as e:
        return f"cannot become user {user}: {e.strerror} (-u needs stalkd started as root)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server with beanstalkd-style ``argv`` (without the program name); exit status."""
    t_exec = time.monotonic()
    got = parse_args(list(sys.argv[1:] if argv is None else argv))
    if isinstance(got, Exit):
        sys.stdout.write(got.stdout)
        sys.stderr.write(got.stderr)
        return got.code
    cfg: Config = got
    tls = acl = None
    if cfg.tls_listen or cfg.acl:
        # Checked before binding: a bad file is an error at start, not at the first client.
        from stalkd.server.acl import AclError, load_acl
        from stalkd.server.tls import TlsConfigError, TlsFiles, server_context

        try:
            if cfg.tls_cert is not None:
                tls = server_context(TlsFiles(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca))
            if cfg.acl is not None:
                acl = load_acl(cfg.acl)
        except (TlsConfigError, AclError) as e:
            sys.stderr.write(f"stalkd: {e}\n")
            return EXIT_CONFIG
    try:
        listeners = bind_all(from_systemd(), "" if cfg.no_plain else cfg.listen, cfg.port,
                             unix=cfg.unix, tls=cfg.tls_listen, socket_mode=cfg.socket_mode)
    except ListenError as e:
        sys.stderr.write(f"stalkd: {e}\n")
        return EXIT_LISTEN
    # Heavy imports only now that we listen, and before -u drops privileges: the new user may
    # be unable to read the Python installation (a pyenv under /root, say).
    # The collector stays off while they run: the tens of thousands of objects they make live as
    # long as the process, and a collection now would only walk them (~6 of ~85 ms of CPU,
    # python -c 'import stalkd.node.serve' with and without); frozen, later ones skip them too.
    gc.disable()
    try:
        from stalkd.node.serve import preload, run

        preload(cfg)
        gc.freeze()
    finally:
        gc.enable()
    if cfg.user is not None:
        err = _become(cfg.user)
        if err is not None:
            sys.stderr.write(f"stalkd: {err}\n")
            return EXIT_LISTEN
    try:
        return run(cfg, listeners, t_exec, tls=tls, acl=acl)
    except (ImportError, PermissionError) as e:  # something read after the switch
        who = f" as user {cfg.user}" if cfg.user is not None else ""
        sys.stderr.write(f"stalkd: cannot run{who}: {e}\n")
        return EXIT_LISTEN


def beanstalkd_main() -> None:
    """Console script ``stalkd-server``: a drop-in for the ``beanstalkd`` binary."""
    sys.exit(main())


if __name__ == "__main__":
    beanstalkd_main()
