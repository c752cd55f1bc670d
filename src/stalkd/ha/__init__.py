"""Automatic failover: a lease in etcd decides which node is the primary.

The model is Patroni's: leadership is a key in a consensus store that already exists and is
trusted (etcd), bound to a lease the holder keeps alive. Nothing here elects anyone; etcd's
compare-and-swap on the key does. The holder checks, on its own monotonic clock, that its lease
is still alive before it lets an acknowledgement out (``LeaseKeeper.may_acknowledge``), with a
margin that covers its own pauses, so it stops acknowledging before anyone else may start.

- ``address``: the cluster address (``etcd://h1:2379,h2:2379/stalkd/<cluster>``).
- ``etcd``: a small client for etcd's v3 API through its JSON gateway (no extra dependency).
- ``lease``: what a holder may assume about its lease (pure: times are arguments).
- ``keeper``: the thread that campaigns for the key, renews the lease and reports changes.
"""

from stalkd.ha.address import ClusterAddress, parse_cluster
from stalkd.ha.etcd import Etcd, EtcdError, EtcdUnavailable
from stalkd.ha.keeper import Leadership, LeaseKeeper
from stalkd.ha.lease import LeaseHold

__all__ = ["ClusterAddress", "parse_cluster", "Etcd", "EtcdError", "EtcdUnavailable", "Leadership",
           "LeaseKeeper", "LeaseHold"]
