"""What a parser gives besides commands: ``NEED_DATA`` and the error replies of a line it cannot read.

Both parsers give these very objects: the Python one (``parser``, ``lines``) and the C one, which
``accel`` configures with them. So a server whose C parser runs imports neither Python parser
module (their tables and regexes are built for that parser alone).

Example:
    >>> NEED_DATA, BAD_FORMAT
    (<NeedData.NEED_DATA: 'NEED_DATA'>, Reply(word='BAD_FORMAT', args=()))
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final, Literal

from stalkd.protocol.commands import Command, Reply

__all__ = ["NEED_DATA", "NeedData", "Item", "BAD_FORMAT", "UNKNOWN_COMMAND"]


class NeedData(enum.Enum):
    """The type of ``NEED_DATA``: feed more bytes before asking again."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA

if TYPE_CHECKING:
    Item = Command | Reply | Literal[NeedData.NEED_DATA]
else:  # the same at run time without typing's Literal (see grammar.ArgKind)
    Item = Command | Reply | NeedData

BAD_FORMAT: Final = Reply("BAD_FORMAT")
UNKNOWN_COMMAND: Final = Reply("UNKNOWN_COMMAND")
