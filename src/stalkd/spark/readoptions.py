"""The ``stalkd`` source's read options (listed in ``source``'s docstring), parsed once on the
driver into :class:`ReadOptions`; a bad value raises :class:`SourceOptionError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ReadOptions", "SourceOptionError", "ArchiveMode", "DEFAULT_BATCH", "DEFAULT_SLICE",
           "flag_option", "int_option"]

ArchiveMode = bool | Literal["only"]
DEFAULT_BATCH = 65536  # rows; fewer per-batch costs on both sides than 8192 (~5-10% CPU)
DEFAULT_SLICE = 1_000_000


class SourceOptionError(ValueError):
    """A ``stalkd`` source option with a bad value; names the option."""


@dataclass(frozen=True)
class ReadOptions:
    """The parsed source options (listed in ``source``'s docstring)."""

    path: str
    records: Literal["raw", "wal"] = "raw"
    body: bool = False
    archive: ArchiveMode = True
    start: int = 0
    end: int | None = None
    batch_size: int = DEFAULT_BATCH
    slice_records: int = DEFAULT_SLICE
    partitions: int = 0  # 0: one per core of the planning host
    pushdown: bool = False
    markers: bool = False

    @classmethod
    def parse(cls, options: Any) -> ReadOptions:
        opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise SourceOptionError("the stalkd source needs a log directory: .load(dir) or .option('path', dir)")
        records = opts.get("records", "raw").lower()
        if records not in ("raw", "wal"):
            raise SourceOptionError(f"option records={records!r}: expected 'raw' or 'wal'")
        archive_s = opts.get("archive", "true").lower()
        archive: ArchiveMode = {"true": True, "false": False, "only": "only"}.get(archive_s)  # type: ignore[assignment]
        if archive is None:
            raise SourceOptionError(f"option archive={archive_s!r}: expected 'true', 'false' or 'only'")
        end_s = opts.get("endoffset")
        return cls(
            path=path,
            records=records,  # type: ignore[arg-type]
            body=flag_option(opts, "body"),
            archive=archive,
            start=int_option(opts, "startoffset", 0),
            end=None if end_s is None else int_option(opts, "endoffset", 0),
            batch_size=int_option(opts, "batchsize", DEFAULT_BATCH, minimum=1),
            slice_records=int_option(opts, "maxrecordsperpartition", DEFAULT_SLICE, minimum=1),
            partitions=int_option(opts, "partitions", 0, minimum=1),
            pushdown=flag_option(opts, "pushdown"),
            markers=flag_option(opts, "markers"),
        )


def flag_option(opts: dict[str, str], key: str) -> bool:
    value = opts.get(key, "false").lower()
    if value not in ("true", "false"):
        raise SourceOptionError(f"option {key}={value!r}: expected 'true' or 'false'")
    return value == "true"


def int_option(opts: dict[str, str], key: str, default: int, minimum: int = 0) -> int:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        raise SourceOptionError(f"option {key}={opts[key]!r}: expected an integer") from None
    if value < minimum:
        raise SourceOptionError(f"option {key}={value}: must be at least {minimum}")
    return value
