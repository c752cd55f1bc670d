"""What ``stalkd serve`` prints instead of starting: its help (``-h``) and its version (``-v``).

Only the version's second line imports anything, and only when asked: this module is loaded
before the listening socket is bound.
"""

from __future__ import annotations

__all__ = ["USAGE", "VERSION_TEXT", "BEANSTALKD_VERSION", "version_text"]

BEANSTALKD_VERSION = "1.13"  # the protocol dialect we speak; clients gate features on it
VERSION_TEXT = f"beanstalkd {BEANSTALKD_VERSION} (stalkd 0.1.0)\n"


def version_text() -> str:
    """``-v``: the dialect first (clients read it), then which parser runs and which modules
    run compiled by Cython, so a test or a person can tell whether the build is there and in use
    (``STALKD_NO_EXTENSIONS``).
    """
    # only on this exit path: start-up stays light
    from stalkd.extensions import compiled_modules
    from stalkd.protocol.accel import IMPLEMENTATION
    from stalkd.server.fastconn import IMPLEMENTATION as CONN

    hot = "C accelerator" if IMPLEMENTATION == "c" else "pure Python"
    return (f"{VERSION_TEXT}hot path: {hot} (stalkd.protocol.accel.IMPLEMENTATION={IMPLEMENTATION!r}, "
            f"stalkd.server.fastconn.IMPLEMENTATION={CONN!r})\n"
            f"compiled by Cython: {_listed(compiled_modules())}\n")


def _listed(modules: dict[str, bool]) -> str:
    """``a, b (2 of 2)``, or ``none (0 of 2: ...)``: which of the Cython modules run compiled."""
    on = [name for name, compiled in modules.items() if compiled]
    count = f"{len(on)} of {len(modules)}"
    if on:
        return f"{', '.join(on)} ({count})"
    return f"none ({count}: STALKD_NO_EXTENSIONS=1, or built without Cython or a compiler)"


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
          --max-connections N refuse connections beyond N, TLS handshakes in progress
                              included (default 10000)
          --max-output N      per-connection buffered reply bytes before the server stops
                              reading that connection (default 4194304)
          --max-memory N      bytes all connections together may hold in unparsed input,
                              bodies being received and unsent replies (K, M, G suffixes);
                              past it the largest holders stop being read, and one that
                              keeps it past for 2 s is closed (default: an eighth of the
                              machine's memory, at most 512M; shown in stats)
          --log-level LEVEL   debug | info | warning | error (default info)
          --max-results N     results (result-put) one client identity may keep at once
                              (default 100000; plain and UNIX clients count as one)
          --max-result-bytes N  bytes of results one identity may keep (default 67108864)
          --max-result-ttl SECONDS  longest result TTL accepted (default 2592000: 30 days);
                              past a limit result-put answers RESULT_LIMIT (see `stats`)

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
          --replication-secret FILE
                              a secret (16+ characters, file mode 0600) a standby must
                              prove to replicate; the same file on the primary and its
                              standbys. Without it only a TLS listener's ACL identities
                              with replicate = true may replicate
          --ha etcd://HOST:PORT,.../stalkd/CLUSTER
                              a node of an automatic-failover cluster: the node holding
                              the leader lease in etcd is the primary, the others follow
                              it (needs --dir and --name; docs/standby.md, "Clusters")
          --name NODE         this node's name in the cluster
          --ha-ttl SECONDS    the leader lease (default 5): a dead primary is replaced
                              within about this, and stops acknowledging before it ends
          --advertise ADDR    where the other nodes reach this server, as --standby-of
                              takes it (default: the plain listener's address)

Listeners (several may run at once; each has its own policy):
          --unix PATH         also listen on a UNIX socket (file permissions decide who
                              may connect; repeatable); removed when the server stops
          --socket-mode MODE  permissions of UNIX socket files, octal (default 0660)
          --tls-listen ADDR:PORT  also listen with TLS 1.2+ on ADDR:PORT (repeatable)
          --tls-cert FILE     server certificate (chain) in PEM, for --tls-listen
          --tls-key FILE      its private key (default: in --tls-cert's file)
          --tls-client-ca FILE  require a client certificate signed by these CAs; its
                              subject is the connection's identity (in the logs, the ACL)
          --max-handshakes-per-address N
                              TLS handshakes in progress from one client address (default
                              64; handshakes also count in --max-connections)
          --handshake-timeout S
                              seconds a TLS handshake may take (default 10)
          --acl FILE          per-identity rules for TLS clients (TOML: the tubes each
                              serves as worker or producer, admin = true; see
                              docs/access-control.md); refused commands get
                              PERMISSION_DENIED
          --no-plain          no plain -l/-p listener (only --unix and --tls-listen ones)
          --plain-network-ok  do not warn that the plain listener is on a network address
          (SIGHUP reloads the TLS certificate, key, client CAs and the ACL file)
 -c, -n                       accepted and ignored, as in beanstalkd
 -v       --version           show version information
 -V       --verbose           increase verbosity
 -h       --help              show this help
"""
