"""Auto-registration of the ``stalkd`` Spark data source.

Spark looks for top-level modules named ``pyspark_*`` that define ``DefaultSource`` and
registers them in every session, so ``spark.read.format("stalkd")`` works without calling
``spark.dataSource.register`` (and survives ``spark.newSession()``).
"""

from stalkd.spark.source import StalkdDataSource as DefaultSource

__all__ = ["DefaultSource"]
