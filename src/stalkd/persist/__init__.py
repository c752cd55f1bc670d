"""stalkd.persist: the engine's state made durable: its write-ahead log in ``stalkd.log``,
snapshots, compaction, recovery and the data directory as a whole.

The rules of the state machine are ``stalkd.engine``'s; this package only writes what the
engine did and rebuilds an engine from it (``stalkd.engine.replay`` is the rule for each record).
Layering: ``log`` < ``engine`` < ``persist`` < everything that serves (``server``, ``replication``).
"""
