"""Child process for test_concurrent_reader.py: appends numbered records until it reaches N."""

from __future__ import annotations

import sys

from stalkd.log import Log


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2])
    with Log.open(path, segment_size=8192, durability="never") as log:
        i = 0
        while i < n:
            k = min(1 + i % 13, n - i)
            if k == 1:
                log.append(b"%d|" % i + b"#" * (i % 97))
            else:
                log.append_many([b"%d|" % j + b"#" * (j % 97) for j in range(i, i + k)])
            i += k


if __name__ == "__main__":
    main()
