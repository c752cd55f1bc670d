"""stalkd.node: the composition root, the commands that put every layer together.

``stalkd serve`` (``node.cli``, then ``node.serve`` once the port is open) wires the engine and
its persistence, the protocol server, replication, the admin endpoint, the archive shipper and
the cluster lease; ``stalkd log`` (``node.logcmd``) gives the log layer's command the data
directory's and the archive's checks. Nothing below this package imports it: each layer is
usable and testable without the ones above it (``scripts/check_imports.py`` checks the order).
"""
