"""stalkd.server: the beanstalkd protocol over TCP (or a UNIX socket), durable by default.

Modules, in start-up order:
  ``config``  beanstalkd's flags (plus long names) -> ``Config``, a pure parse
  ``listen``  the listening socket, bound before anything heavy is imported
  ``cli``     ``stalkd serve`` / ``stalkd-server``: parse, bind, then hand over to ``serve``
  ``serve``   logging, WAL recovery, the event loop (uvloop), signals, graceful stop
  ``app``     ``Server``: one engine on the loop, replies held until their records are durable,
              group commit off the loop thread, timers
  ``conn``    ``Connection``: one asyncio protocol object per client (pipelining, blocking
              reserves, per-connection output bound)

Example (shell)::

    stalkd serve --dir ./data            # 127.0.0.1:11300, fsync before every acknowledgement
    stalkd-server -l 127.0.0.1 -p 11300  # in memory, exactly like `beanstalkd -l ... -p ...`
"""
