"""stalkd.protocol: the beanstalkd wire protocol, sans-I/O.

``Parser`` turns received bytes into command values (``stalkd.protocol.commands``), error replies
or ``NEED_DATA``; ``encode_reply`` turns reply values into exact wire bytes. ``Parser`` and
``encode_line``/``encode_reply_parts`` are the C accelerator's when it is built (``IMPLEMENTATION``, see ``accel``). The command grammar
is one table (``grammar.COMMANDS``); YAML key orders and quoting live in ``stats``.

Example:
    >>> from stalkd.protocol.commands import Reply
    >>> p = Parser()
    >>> p.feed(b"watch emails\\r\\n")
    >>> p.next()
    Watch(tube='emails')
    >>> encode_reply(Reply("WATCHING", (2,)))
    b'WATCHING 2\\r\\n'
"""

from stalkd.protocol.accel import IMPLEMENTATION, Parser, encode_line, encode_reply_parts
from stalkd.protocol.grammar import COMMANDS, DEFAULT_MAX_JOB_SIZE, LINE_MAX, MAX_JOB_SIZE_LIMIT
from stalkd.protocol.markers import BAD_FORMAT, NEED_DATA, UNKNOWN_COMMAND, Item, NeedData
from stalkd.protocol.replies import encode_reply

__all__ = [
    "Parser", "NEED_DATA", "NeedData", "Item", "encode_reply", "encode_reply_parts", "encode_line",
    "IMPLEMENTATION",
    "BAD_FORMAT", "UNKNOWN_COMMAND", "COMMANDS", "DEFAULT_MAX_JOB_SIZE", "LINE_MAX",
    "MAX_JOB_SIZE_LIMIT",
]  # fmt: skip
