"""Opening an archive URL as a ``pyarrow.fs`` file system, and writing objects safely into it.

A URL is anything ``pyarrow.fs.FileSystem.from_uri`` accepts, or a plain local path. For
``s3://`` the AWS SDK reads its usual variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``); ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_S3``) points it at another S3 API server, and an ``http://`` endpoint turns
TLS off.

Ensures: ``put_atomic`` leaves either the whole object under its name or no object there: on
object stores a PUT (or a multipart upload) becomes visible only once complete; elsewhere the
bytes go to a temporary name first and are renamed into place.

Example::

    >>> import tempfile
    >>> store = Store.open(tempfile.mkdtemp())
    >>> store.put_atomic("a/b.bin", b"xyz"); store.read("a/b.bin")
    b'xyz'
"""

from __future__ import annotations

import contextlib
import mmap
import os
import uuid
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["Store", "is_url", "StoreError", "ObjectMissingError"]

_URL_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "file", "abfs", "abfss")


class StoreError(OSError):
    """An archive URL that cannot be opened, or an object that is unreadable."""


class ObjectMissingError(StoreError):
    """The object does not exist (as opposed to a store that could not be reached)."""


def is_url(path: str) -> bool:
    """True for ``scheme://...`` archive URLs (not for plain local paths).

    >>> is_url("s3://b/p"), is_url("/data/wal"), is_url("file:///tmp/a")
    (True, False, True)
    """
    scheme = urlparse(path).scheme.lower()
    return scheme in _URL_SCHEMES


def _s3(url: str) -> tuple[pafs.FileSystem, str]:
    parsed = urlparse(url)
    root = (parsed.netloc + parsed.path).rstrip("/")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, object] = {}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    if endpoint:
        ep = urlparse(endpoint)
        kwargs["endpoint_override"] = ep.netloc or ep.path
        kwargs["scheme"] = ep.scheme or "https"
        # Other S3 servers usually take path-style requests only (bucket in the path).
        kwargs["force_virtual_addressing"] = False
    return pafs.S3FileSystem(**kwargs), root


@dataclass(frozen=True)
class Store:
    """An archive root: a file system and the path of the root inside it."""

    url: str
    fs: pafs.FileSystem
    root: str

    @classmethod
    def open(cls, url: str) -> Store:
        """The store at ``url`` (a local path, ``file://``, ``s3://``, ``gs://``, ``hdfs://``)."""
        try:
            if not is_url(url):
                return cls(url, pafs.LocalFileSystem(), os.path.abspath(url))
            if urlparse(url).scheme.lower() == "s3":
                fs, root = _s3(url)
            else:
                fs, root = pafs.FileSystem.from_uri(url)
        except (pa.ArrowException, ValueError) as exc:
            raise StoreError(f"cannot open archive {url!r}: {exc}") from exc
        return cls(url, fs, root.rstrip("/"))

    @property
    def object_store(self) -> bool:
        """True where a rename is a copy (S3, GCS): objects are written in one go instead."""
        return self.fs.type_name in ("s3", "gcs")

    def path(self, name: str) -> str:
        return f"{self.root}/{name}" if self.root else name

    def put_atomic(self, name: str, data: bytes | bytearray | memoryview | mmap.mmap) -> None:
        """Write ``data`` as ``name``: readers see the whole object or none (see module doc)."""
        final = self.path(name)
        parent = final.rsplit("/", 1)[0]
        if not self.object_store:
            self.fs.create_dir(parent, recursive=True)
            tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{final.rsplit('/', 1)[1]}"
            try:
                with self.fs.open_output_stream(tmp) as out:
                    out.write(data)
                    if isinstance(self.fs, pafs.LocalFileSystem):
                        _fsync_local(tmp)
                self.fs.move(tmp, final)
                if isinstance(self.fs, pafs.LocalFileSystem):
                    _fsync_local(parent)
            except BaseException:
                with contextlib.suppress(OSError, pa.ArrowException):
                    self.fs.delete_file(tmp)
                raise
            return
        with self.fs.open_output_stream(final) as out:
            out.write(data)

    def read(self, name: str) -> bytes:
        """The whole object ``name``; ObjectMissingError if there is none."""
        return self.read_range(name, 0, None)

    def read_range(self, name: str, start: int, length: int | None) -> bytes:
        """``length`` bytes of ``name`` from ``start`` (to its end if None): one ranged GET.

        For objects never replaced (segments); see ``read``.
        """
        try:
            with self.fs.open_input_file(self.path(name)) as f:
                n = f.size() - start if length is None else length
                return bytes(f.read_at(n, start)) if n > 0 else b""
        except FileNotFoundError as exc:
            raise ObjectMissingError(f"{self.url}: {name} not found") from exc
        except pa.ArrowException as exc:
            raise StoreError(f"{self.url}: reading {name} failed: {exc}") from exc

    def delete(self, name: str) -> None:
        """Remove the object ``name`` (gone already is fine)."""
        try:
            self.fs.delete_file(self.path(name))
        except FileNotFoundError:
            pass
        except pa.ArrowException as exc:
            raise StoreError(f"{self.url}: deleting {name} failed: {exc}") from exc

    def exists(self, name: str) -> bool:
        info = self.fs.get_file_info(self.path(name))
        return bool(info.type == pafs.FileType.File)


def _fsync_local(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
