#!/usr/bin/env bash
# What compiling the hot path with mypyc would buy, measured, without changing the project:
# copy src/ to a scratch dir, make the two edits mypyc needs there, compile 12 modules, then
# run server_bench with the compiled tree as the peer (same run, alternating). Ratios below 1
# in the printed table mean the compiled peer is faster.
#
#   bash bench/mypyc_trial.sh [server_bench options, default: --class memory --class never]
#
# Needs mypy (dev extra) and gcc with Python headers. About 30 s of build, then the bench.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
work=$(mktemp -d /tmp/stalkd-mypyc.XXXXXX)
trap 'rm -rf "$work"' EXIT
git archive HEAD src | tar -x -C "$work"
cd "$work/src"
# mypyc has no multiple inheritance: chain the engine's mixins (same MRO as the diamond).
sed -i 's/^from stalkd.engine.state import EngineState, Outcome/from stalkd.engine.queries import Queries\nfrom stalkd.engine.state import EngineState, Outcome/; s/^class Timers(EngineState):/class Timers(Queries):/' stalkd/engine/timers.py
sed -i 's/^class Engine(Timers, Queries):/class Engine(Timers):/' stalkd/engine/engine.py
# A native class cannot subclass RuntimeError: keep this one an ordinary Python class.
sed -i 's/^class FatalStorageError(RuntimeError):/from mypy_extensions import mypyc_attr\n\n\n@mypyc_attr(native_class=False)\nclass FatalStorageError(RuntimeError):/' stalkd/server/storage.py
"$OLDPWD/$(dirname "$PY")/mypyc" \
    stalkd/protocol/parser.py stalkd/protocol/replies.py stalkd/engine/engine.py \
    stalkd/engine/state.py stalkd/engine/heap.py stalkd/engine/tube.py stalkd/engine/job.py \
    stalkd/engine/timers.py stalkd/engine/queries.py stalkd/engine/connstate.py stalkd/server/storage.py \
    stalkd/server/connection.py stalkd/server/app.py >/dev/null
cd "$OLDPWD"
if [ $# -eq 0 ]; then set -- --class memory --class never; fi
echo "# peer (\"beanstalkd\" column) = the mypyc-compiled copy of HEAD in $work/src"
"$PY" bench/server_bench.py --peer-src "$work/src" --no-latency --no-startup "$@"
