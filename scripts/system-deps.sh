#!/usr/bin/env bash
# Installs the real components the test suite and benchmarks run against, when they are missing:
# Debian's beanstalkd (compatibility transcripts, benchmarks), a Java 17 runtime (PySpark),
# PostgreSQL (outbox tests), Redis (the RQ peer in the worker benchmark), Chromium (report check,
# dashboard tests through Playwright), tmux (`stalkd top` tests), openssl (the TLS tests make
# their certificates with it), stunnel4 (beanstalkd behind TLS, the peer in bench/tls_bench.py),
# valgrind and strace (bench/floor_bench.py --counts: instructions and system calls per job),
# perf (bench/standby_bench.py --counts: the kernel's work per job in each process),
# etcd (automatic failover's lease store), fuse3 and its headers (the power-loss file system of the
# fault campaign), iproute2 and nftables (network namespaces and partitions), faketime (clock jumps).
# Needs root for apt-get; without it, prints what is missing and lets the tests skip locally.
set -euo pipefail

missing=()
command -v beanstalkd >/dev/null 2>&1 || missing+=(beanstalkd)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v stunnel4 >/dev/null 2>&1 || missing+=(stunnel4)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v strace >/dev/null 2>&1 || missing+=(strace)
command -v perf >/dev/null 2>&1 || missing+=(linux-perf)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
[[ -e /usr/include/fuse3/fuse.h ]] || missing+=(libfuse3-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)

if ((${#missing[@]} == 0)); then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "system-deps: missing ${missing[*]} (not root: install them with apt-get; their tests will be skipped)" >&2
    exit 0
fi
echo "system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts services it installs; the tests start their own instances on ephemeral ports.
for svc in beanstalkd redis-server postgresql stunnel4 etcd; do
    (command -v systemctl >/dev/null && systemctl stop "$svc") >/dev/null 2>&1 || true
    (command -v service >/dev/null && service "$svc" stop) >/dev/null 2>&1 || true
done
