"""stalkd.archive: WAL history shipped to a directory or an object store, and read back from it.

``stalkd serve --archive URL`` runs a :class:`~stalkd.archive.shipper.Shipper` that copies each
sealed WAL segment (and each snapshot) to ``URL`` and records it in a manifest
(:mod:`~stalkd.archive.manifest`); the Spark source and ``stalkd analyze`` read the same URL
through :mod:`~stalkd.archive.remote`. Stores are opened through ``pyarrow.fs``
(:mod:`~stalkd.archive.store`): local paths, ``file://``, ``s3://`` (endpoint, region and
credentials from the standard AWS variables), and ``gs://`` / ``hdfs://`` where pyarrow has them.

Layout under the URL::

    manifest.json                      the index: parts and snapshots (written last, replaced whole)
    manifest/part-<base>.json          up to 1000 segment entries each; only the last one grows
    segments/seg-<base, 20 digits>.log a sealed segment, compacted: header, frames, footer
    snapshots/snap-<seq>.snap          engine snapshots, as on the server's disk
"""
