"""Child process for test_crash.py's group test: consumes with durability ``always``, acking and
nacking at random, and reports "try <offsets>" before each ack and "ok" after it returned.

Mode ``gappy`` acks only odd offsets and never gives the even ones back, so the cursor has to
hold hundreds of acked ranges (more than a 4 KiB slot) and grows its file while being killed."""

from __future__ import annotations

import random
import sys

from stalkd.log import Log


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    gappy = sys.argv[3:] == ["gappy"]
    rng = random.Random(seed)
    out = sys.stdout
    with Log.open(path, segment_size=4096, durability="always") as log:
        g = log.group("g", durability="always")
        out.write("open\n")
        out.flush()
        while True:
            if rng.random() < 0.3:
                log.append_many([b"r"] * rng.randrange(1, 20))
            if gappy:
                log.append_many([b"r"] * 40)
                acks, rest = [m for m in g.poll(40) if m.offset % 2], []
            else:
                msgs = g.poll(rng.randrange(1, 12))
                rng.shuffle(msgs)
                cut = rng.randrange(0, len(msgs) + 1)
                acks, rest = msgs[:cut], msgs[cut:]
            if rest and rng.random() < 0.5:
                g.nack(*rest)
            if acks:
                out.write("try " + " ".join(str(m.offset) for m in acks) + "\n")
                out.flush()
                g.ack(*acks)
                out.write("ok\n")
                out.flush()


if __name__ == "__main__":
    main()
