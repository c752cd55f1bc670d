"""The old import path of the command and reply values, which now live in
``stalkd.protocol.commands`` (the protocol owns its vocabulary; the engine consumes it)."""

from stalkd.protocol.commands import *  # noqa: F403
from stalkd.protocol.commands import __all__  # noqa: F401
