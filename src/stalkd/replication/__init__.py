"""Hot standby by WAL shipping (``stalkd serve --standby-of``, ``--sync-standbys``, ``stalkd promote``).

One concept per module:

- ``wire``: the replication handshake and message format (the only place it is spelled);
- ``epochs``: who is primary, since which log offset, and the fencing rule (pure, plus a file);
- ``gate``: ``--sync-standbys N``: which group-commit batch N standbys hold durable (pure);
- ``sender``: the primary's side: one stream per standby, read from its own log;
- ``receiver``: the standby's side: append the frames durably, apply them, acknowledge;
- ``catchup``: before a standby serves: copy a snapshot, or cut a tail the new primary lacks;
- ``swap``: a running standby's copy put in place of its local state, whole across a power cut.
"""
