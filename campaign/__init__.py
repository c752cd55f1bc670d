"""campaign: a Jepsen-style fault campaign against stalkd (see campaign/README.md).

A workload of producers and workers records every operation into a history; nemeses inject
faults (kill -9, pauses, partitions, a full disk, clock jumps); the checker reads the history
and counts what must never happen; ``python -m campaign`` runs it all and writes the table and
the plots.
"""
