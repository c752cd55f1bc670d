"""stalkd.engine: beanstalkd's job semantics as a pure state machine, and its persisted records.

>>> from stalkd.engine import Engine
>>> from stalkd.protocol.commands import Put
>>> e = Engine(); e.connect(1, 0.0); e.apply(1, Put(0, 0, 10, b"x"), 0.0).reply.word
'INSERTED'
"""

from stalkd.engine.engine import Engine, EngineError, Outcome

__all__ = ["Engine", "EngineError", "Outcome"]
