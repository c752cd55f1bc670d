"""``stalkd`` command line: a table of subcommands, each implemented in the layer that owns it.

Subcommand modules are imported only when chosen, so ``stalkd serve`` binds its socket before
anything heavy is imported (client test fixtures connect 0.1 s after starting the server).
Each target is ``"module:function"``; the function takes the remaining argv and returns an exit
code.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

# name -> (target, one-line summary). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("stalkd.node.cli:main", "run the beanstalkd-compatible server"),
    "put": ("stalkd.client.cli:put", "put a job into a tube"),
    "peek": ("stalkd.client.cli:peek", "show a job by id, or the next ready/delayed/buried one"),
    "delete": ("stalkd.client.cli:delete", "delete jobs by id"),
    "kick": ("stalkd.client.cli:kick", "kick buried (or delayed) jobs back to ready"),
    "stats": ("stalkd.client.cli:stats", "server statistics as a table (or --json)"),
    "stats-tube": ("stalkd.client.cli:stats_tube", "statistics of one tube"),
    "list-tubes": ("stalkd.client.cli:list_tubes", "list the server's tubes"),
    "tubes": ("stalkd.admin.cli:tubes", "tubes with their job counts, waiting workers, pauses"),
    "jobs": ("stalkd.admin.cli:jobs", "list, delete, kick or move the jobs of a tube"),
    "pause": ("stalkd.admin.cli:pause", "pause a tube for SECONDS (0 resumes it)"),
    "promote": ("stalkd.admin.cli:promote", "make a standby the primary (stalkd serve --standby-of)"),
    "cluster": ("stalkd.admin.cluster:main", "an automatic-failover cluster (serve --ha): status, "
                "switchover"),
    "top": ("stalkd.admin.top:main", "live full-screen view of tubes, rates and workers"),
    "dashboard": ("stalkd.admin.cli:dashboard", "the web dashboard's URL (stalkd serve --admin)"),
    "worker": ("stalkd.worker.cli:worker", "run the tasks of an app: stalkd worker module:app"),
    "scheduler": ("stalkd.worker.cli:scheduler_main", "put the jobs of an app's cron schedules: "
                  "stalkd scheduler module:app"),
    "cancel": ("stalkd.worker.cancel:main", "cancel jobs: delete waiting ones, ask running "
               "ones to stop"),
    "workers": ("stalkd.worker.cli:workers", "live worker processes and the jobs each runs now"),
    "failed": ("stalkd.worker.cli:failed", "list dead-lettered (buried) jobs with their errors"),
    "retry": ("stalkd.worker.cli:retry", "kick dead-lettered jobs back to ready"),
    "log": ("stalkd.node.logcmd:log_main", "check or repair a log (stalkd log inspect|repair DIR; inspect also an archive URL)"),
    "analyze": ("stalkd.spark.cli:analyze", "Spark analytics over a WAL: tables, plots, report"),
    "bench": ("stalkd.spark.cli:bench", "benchmarks and history generators (stalkd bench history)"),
}

_USAGE = "usage: stalkd [-h] [--version] COMMAND [ARGS...]"


def _help() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = [
        _USAGE,
        "",
        "A durable, beanstalkd-compatible job queue.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()),
        "",
        "Run 'stalkd COMMAND --help' for a command's options.",
        "Quick start: stalkd serve --dir ./data   (listens on 127.0.0.1:11300)",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_help())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from stalkd import __version__

        print(f"stalkd {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"stalkd: unknown command {name!r}\n\n{_help()}", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        code: int = func(rest)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`stalkd tubes | head -3`), which is fine: stop quietly, for
        # every command. stdout goes to /dev/null first, or the interpreter's own flush at exit
        # would raise the same error again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
