"""Child process for test_crash.py: appends numbered records under a durability policy and
reports each append that returned on stdout ("<last offset>\\n"), until it is killed."""

from __future__ import annotations

import random
import sys

from stalkd.log import Log


def main() -> None:
    path, seed, seg, durability = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rng = random.Random(seed)
    out = sys.stdout
    with Log.open(path, segment_size=seg, durability=durability) as log:
        out.write(f"open {log.next_offset}\n")
        out.flush()
        while True:
            n = rng.choice((1, 1, 1, 2, 7))
            first = log.next_offset
            batch = [b"%d:" % (first + i) + b"." * rng.randrange(0, 300) for i in range(n)]
            last = log.append(batch[0]) if n == 1 else log.append_many(batch)[1]
            out.write(f"{last}\n")
            out.flush()


if __name__ == "__main__":
    main()
