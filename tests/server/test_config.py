"""beanstalkd's command line, parsed purely: table-driven cases (no process started)."""

from __future__ import annotations

import pytest

from stalkd.server.config import MAX_JOB_SIZE_LIMIT, Config, Exit, parse_args


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {"listen": "127.0.0.1", "port": 11300, "data_dir": None, "durability": "always"}),
        (["-l", "0.0.0.0", "-p", "11301"], {"listen": "0.0.0.0", "port": 11301}),
        (["-l0.0.0.0", "-p11301"], {"listen": "0.0.0.0", "port": 11301}),  # attached values
        (["-l", "unix:/tmp/x.sock"], {"unix_path": "/tmp/x.sock", "address": "unix:/tmp/x.sock"}),
        (["-b", "/d"], {"data_dir": "/d", "durability": "always"}),  # deliberate: beanstalkd -f50
        (["-b", "/d", "-f", "0"], {"durability": "always"}),
        (["-b", "/d", "-f0"], {"durability": "always"}),
        (["-b", "/d", "-f", "50"], {"durability": "every:50"}),
        (["-b", "/d", "-F"], {"durability": "never"}),
        (["-F", "-f5"], {"durability": "every:5"}),  # the last flag wins, as in beanstalkd
        (["-VVV"], {"verbosity": 3, "effective_log_level": "debug"}),
        (["-VFp", "11302"], {"verbosity": 1, "durability": "never", "port": 11302}),  # grouped
        (["-Vb/d"], {"verbosity": 1, "data_dir": "/d"}),
        (["-z", "10"], {"max_job_size": 10}),
        (["-z", "65536"], {"max_job_size": 65536}),
        (["-s", "1"], {"wal_size": 4096}),  # rounded up to a multiple of 4096
        (["-s", "4097"], {"wal_size": 8192}),
        (["-u", "nobody"], {"user": "nobody"}),
        (["--listen", "::1", "--port=11303"], {"listen": "::1", "address": "[::1]:11303"}),
        (["--dir", "/d", "--fsync", "10"], {"data_dir": "/d", "durability": "every:10"}),
        (["--dir=/d", "--no-fsync"], {"durability": "never"}),
        (["--durability", "every:7"], {"durability": "every:7"}),
        (["--max-job-size", "100", "--wal-size", "8192"], {"max_job_size": 100, "wal_size": 8192}),
        (["--max-connections", "3", "--max-output", "1000"], {"max_connections": 3, "max_output": 1000}),
        (["--log-level", "WARNING", "-V"], {"log_level": "warning", "effective_log_level": "warning"}),
        (["--verbose"], {"verbosity": 1}),
        ([], {"archive": False}),
        (["-b", "/d", "--archive"], {"data_dir": "/d", "archive": True}),
        (["-b", "/d", "--archive", "-F"], {"archive": True, "archive_url": None, "durability": "never"}),
        (["-b", "/d", "--archive", "s3://b/p"], {"archive": False, "archive_url": "s3://b/p"}),
        (["--archive=/mnt/a", "-b/d"], {"archive_url": "/mnt/a"}),
        ([], {"unix": (), "socket_mode": 0o660, "tls_listen": (), "no_plain": False}),
        (["--unix", "/a", "--unix=/b", "--socket-mode", "600"], {"unix": ("/a", "/b"), "socket_mode": 0o600}),
        (["--tls-listen", "0.0.0.0:11400", "--tls-listen", "[::1]:0", "--tls-cert", "c.pem",
          "--tls-key", "k.pem", "--tls-client-ca", "ca.pem", "--acl", "acl.toml", "--no-plain"],
         {"tls_listen": (("0.0.0.0", 11400), ("::1", 0)), "tls_cert": "c.pem", "tls_key": "k.pem",
          "tls_client_ca": "ca.pem", "acl": "acl.toml", "no_plain": True}),
        (["-l", "0.0.0.0", "--plain-network-ok"], {"plain_network_ok": True}),
    ],
)
def test_flags(argv: list[str], expected: dict[str, object]) -> None:
    cfg = parse_args(argv)
    assert isinstance(cfg, Config), cfg
    for key, value in expected.items():
        assert getattr(cfg, key) == value, (argv, key)


def test_c_and_n_are_accepted_with_a_warning() -> None:
    cfg = parse_args(["-c", "-n", "-p", "1"])
    assert isinstance(cfg, Config)
    assert cfg.port == 1
    assert [w for w in cfg.warnings if "compacted" in w] and len(cfg.warnings) == 2


def test_max_job_size_is_clamped_to_1gib_with_a_warning() -> None:
    cfg = parse_args(["-z", str(MAX_JOB_SIZE_LIMIT + 1)])
    assert isinstance(cfg, Config)
    assert cfg.max_job_size == MAX_JOB_SIZE_LIMIT
    assert "larger than" in cfg.warnings[0]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["-x"], "unknown flag: -x"),
        (["-Vx"], "unknown flag: -x"),
        (["--frobnicate"], "unknown flag: --frobnicate"),
        (["11300"], "unknown argument: 11300"),
        (["-"], "unknown argument: -"),
        (["-p"], "-p requires an argument"),
        (["-p", "http"], "invalid port for -p: 'http'"),
        (["-p", "70000"], "invalid port"),
        (["-z", "-1"], "invalid size for -z: '-1'"),
        (["-z", "10k"], "invalid size for -z"),
        (["-f", "x"], "invalid size for -f"),
        (["--durability", "sometimes"], "expected always, never or every:<ms>"),
        (["--durability", "every:0"], "expected always, never or every:<ms>"),
        (["--log-level", "loud"], "invalid value for --log-level"),
        (["--max-connections", "0"], "must be at least 1"),
        (["--no-fsync=1"], "takes no value"),
        (["-l", "unix:"], "empty UNIX socket path"),
        (["--listen"], "requires an argument"),
        (["--tls-listen", "0.0.0.0:1"], "--tls-listen needs --tls-cert FILE"),
        (["--tls-listen", "11400", "--tls-cert", "c"], "expected HOST:PORT"),
        (["--acl", "a.toml"], "--acl: only for TLS listeners"),
        (["--socket-mode", "rw"], "invalid mode for --socket-mode"),
        (["--socket-mode", "1777"], "invalid mode"),
        (["--no-plain"], "--no-plain leaves no listener"),
    ],
)
def test_bad_flags_exit_5_naming_the_problem(argv: list[str], needle: str) -> None:
    got = parse_args(argv)
    assert isinstance(got, Exit)
    assert got.code == 5  # beanstalkd's usage(5)
    assert needle in got.stderr
    assert "Options:" in got.stderr  # usage follows the message


def test_help_and_version() -> None:
    h = parse_args(["-h"])
    assert isinstance(h, Exit) and h.code == 0 and "-b DIR" in h.stderr
    v = parse_args(["-v"])
    assert isinstance(v, Exit) and v.code == 0 and v.stdout.startswith("beanstalkd 1.13")
    assert isinstance(parse_args(["--version"]), Exit)


def test_config_is_immutable_and_replace_checks_names() -> None:
    cfg = Config()
    with pytest.raises(AttributeError):
        cfg.port = 1  # type: ignore[misc]
    assert cfg.replace(port=2) == Config(port=2)
    assert cfg.replace(port=2) != cfg
    with pytest.raises(TypeError):
        cfg.replace(prot=2)


def test_help_mentions_archive() -> None:
    got = parse_args(["--help"])
    assert isinstance(got, Exit) and "--archive" in got.stderr and "stalkd analyze" in got.stderr
    assert "--archive URL" in got.stderr and "s3://" in got.stderr
    bad = parse_args(["--archive=s3://b/p"])
    assert isinstance(bad, Exit) and bad.code == 5 and "needs a data directory" in bad.stderr
    bad = parse_args(["-b", "/d", "--archive="])
    assert isinstance(bad, Exit) and bad.code == 5 and "empty URL" in bad.stderr
