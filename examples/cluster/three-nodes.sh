#!/usr/bin/env bash
# A three-node stalkd cluster with automatic failover, on one machine, to try it out:
# one etcd member (Debian's etcd-server) and three nodes on 127.0.0.1:11300, 11301, 11302.
# On real machines run one etcd member and one node per machine, with their own addresses.
#   bash examples/cluster/three-nodes.sh ./cluster     # start (PIDs in ./cluster/*.pid)
#   kill $(cat ./cluster/*.pid)                          # stop everything
set -euo pipefail
dir=${1:-./cluster}
mkdir -p "$dir"
etcd --name e1 --data-dir "$dir/etcd" \
     --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
     --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
     --initial-cluster e1=http://127.0.0.1:2380 >"$dir/etcd.log" 2>&1 &
echo $! >"$dir/etcd.pid"

# The secret a standby proves to replicate: the same file on every node, mode 0600.
[ -e "$dir/replication.secret" ] ||
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/replication.secret")

cluster=etcd://127.0.0.1:2379/stalkd/demo
for i in 0 1 2; do
    # --sync-standbys 1: each acknowledged job is on the primary and the standby of the sync set
    stalkd serve --dir "$dir/node$i" -p $((11300 + i)) --ha "$cluster" --name "node$i" \
        --sync-standbys 1 --replication-secret "$dir/replication.secret" >"$dir/node$i.log" 2>&1 &
    echo $! >"$dir/node$i.pid"
done
# ready once one node holds the lease and all three serve, as primary or following it (the
# status that said so is the one printed: a later one may catch a standby reconnecting)
until status=$(stalkd cluster status "$cluster" 2>/dev/null) &&
      [ "$(grep -cE '^(leader: node[0-9]|node[0-9] +(primary|standby) )' <<<"$status")" = 4 ]; do
    sleep 0.2
done
echo "$status"
