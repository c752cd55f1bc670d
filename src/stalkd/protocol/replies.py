"""Reply values -> exact wire bytes. The only place a reply is spelled out.

Ensures: every reply ends with ``\\r\\n``; ``RESERVED``/``FOUND``/``OK`` carry ``<bytes>`` equal
to the length of the body that follows (the body's own ``\\r\\n`` not counted); ``Close``
encodes to nothing (the server closes the connection instead).

Example:
    >>> encode_reply(Reply("INSERTED", (7,)))
    b'INSERTED 7\\r\\n'
    >>> encode_reply(JobReply("RESERVED", 7, b"hi"))
    b'RESERVED 7 2\\r\\nhi\\r\\n'
"""

from __future__ import annotations

from stalkd.protocol.commands import AnyReply, Close, JobReply, Reply, YamlDict, YamlList
from stalkd.protocol.stats import encode_yaml_dict, encode_yaml_list

__all__ = ["encode_reply", "encode_reply_parts", "encode_line", "WORD_LINES"]

WORD_LINES: dict[str, bytes] = {
    w: f"{w}\r\n".encode()
    for w in (
        "DELETED", "RELEASED", "BURIED", "TOUCHED", "KICKED", "NOT_FOUND", "PAUSED",
        "TIMED_OUT", "DEADLINE_SOON", "NOT_IGNORED", "BAD_FORMAT", "UNKNOWN_COMMAND",
        "EXPECTED_CRLF", "JOB_TOO_BIG", "DRAINING", "OUT_OF_MEMORY", "INTERNAL_ERROR",
        "NOT_PRIMARY",
    )
}  # fmt: skip


def encode_line(r: Reply) -> bytes:
    """A plain ``Reply`` as its wire line (``encode_reply`` for that one type, one call less).

    >>> encode_line(Reply("DELETED"))
    b'DELETED\\r\\n'
    """
    args = r.args
    if not args:
        cached = WORD_LINES.get(r.word)
        return cached if cached is not None else f"{r.word}\r\n".encode()
    if len(args) == 1:
        return f"{r.word} {args[0]}\r\n".encode()
    return f"{r.word} {' '.join(map(str, args))}\r\n".encode()


def encode_reply_parts(reply: AnyReply) -> tuple[bytes, ...]:
    """The reply as byte strings to send in order (a job body is not copied).

    >>> encode_reply_parts(JobReply("FOUND", 1, b"a"))
    (b'FOUND 1 1\\r\\n', b'a', b'\\r\\n')
    """
    if type(reply) is Reply:
        return (encode_line(reply),)
    if type(reply) is JobReply:
        return (f"{reply.word} {reply.id} {len(reply.body)}\r\n".encode(), reply.body, b"\r\n")
    if type(reply) is YamlDict:
        body = encode_yaml_dict(reply.kind, reply.values)
    elif type(reply) is YamlList:
        body = encode_yaml_list(reply.items)
    elif type(reply) is Close:
        return ()
    else:
        raise TypeError(f"not a reply value: {reply!r}")
    return (f"OK {len(body)}\r\n".encode(), body, b"\r\n")


def encode_reply(reply: AnyReply) -> bytes:
    """Exact wire bytes of one reply (empty for ``Close``).

    >>> encode_reply(YamlList(("default",)))
    b'OK 14\\r\\n---\\n- default\\n\\r\\n'
    """
    if type(reply) is Reply:
        return encode_line(reply)
    if type(reply) is JobReply:
        return b"%s %d %d\r\n%s\r\n" % (reply.word.encode(), reply.id, len(reply.body), reply.body)
    return b"".join(encode_reply_parts(reply))
