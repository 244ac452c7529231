"""The `campaign` command: parses arguments and hands each subcommand to the module that owns it.

Handlers are named as "module:function" and imported only when their command runs, so `campaign
plan` never pays for torch or Textual. Exit 0 on success, 2 on bad input (message on stderr), 1 on
any other failure (docs/CLI.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from runner.campaign.errors import CampaignError, RunnerStartFailed, RunnerUnavailable

DESCRIPTION = """\
campaign-console: run a GPU-rental campaign to a decision.

FILE is a campaign file or its folder (default ./campaign.toml). Where a command takes FILE and
another argument, FILE comes first and may be left out.

exit codes: 0 success, 2 bad input (message on stderr), 1 any other failure.
"""

EPILOG = """\
typical session:
  campaign init my-campaign          write a commented campaign.toml to edit
  campaign plan my-campaign          check the schedule against the rental window
  campaign console my-campaign       start the runner (if needed) and watch it
  campaign report my-campaign        the closing budget report
  campaign pull me@gpu-host:my-campaign    (on your laptop) copy the results off and verify them
try it:  campaign demo              (a small campaign that runs on CPU in minutes)

reference (in the source tree): docs/CLI.md (every command, exit code and --json key) and
docs/CAMPAIGN_FILE.md (every table and field of campaign.toml).
"""

# command -> (handler, help, FILE+other-arg name or None)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("runner.cli.demo_cmd:cmd_demo", "write the built-in demo campaign, start its runner, open the console"),
    "init": ("runner.cli.plan_cmds:cmd_init", "write a commented campaign.toml to start from"),
    "check": ("runner.cli.plan_cmds:cmd_check", "validate the campaign file"),
    "plan": ("runner.cli.plan_cmds:cmd_plan", "the schedule against the window, and the other plans compared"),
    "up": ("runner.cli.daemon_cmds:cmd_up", "start the runner in the background (no-op when it runs)"),
    "down": ("runner.cli.daemon_cmds:cmd_down", "stop the runner (runs go on unless --abort-runs)"),
    "console": ("runner.cli.console_cmd:cmd_console", "the terminal console; starts the runner if needed"),
    "status": ("runner.cli.daemon_cmds:cmd_status", "one snapshot of the bundle, GPUs and runs, for scripts"),
    "start": ("runner.cli.daemon_cmds:cmd_start", "start a variant (what the console's key does)"),
    "abort": ("runner.cli.daemon_cmds:cmd_abort", "abort a run, keeping its id and reason"),
    "resume": ("runner.cli.daemon_cmds:cmd_resume", "resume a stopped, failed or aborted run"),
    "decide": (
        "runner.cli.decide_cmd:cmd_decide",
        "the pilot decision from the shell: continue, cut to the variants named, or revisit",
    ),
    "checkpoint": ("runner.cli.checkpoint_cmd:cmd_checkpoint", "load a checkpoint in a fresh process and grade it"),
    "verify": ("runner.cli.report_cmds:cmd_verify", "check the deliverables of every run"),
    "report": ("runner.cli.report_cmds:cmd_report", "the closing budget report"),
    "pull": (
        "runner.cli.pull_cmds:cmd_pull",
        "on your own machine: copy the files off the host over ssh and verify them",
    ),
    "wrap-up": (
        "runner.cli.wrapup_cmd:cmd_wrap_up",
        "see, move (--at) or cancel (--cancel) the wrap-up before the deadline",
    ),
    "notify-test": ("runner.cli.notify_cmd:cmd_notify_test", "send one test message to every [notify] URL"),
    "ledger-snapshot": (
        "runner.cli.fleet_cmds:cmd_ledger_snapshot",
        "write a consistent copy of the ledger (what pull across hosts fetches)",
    ),
    "retrieval": ("runner.cli.pull_cmds:cmd_retrieval", "what must leave the host, with sha256s (what pull reads)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="campaign", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = {name: sub.add_parser(name, help=help_, description=help_) for name, (_, help_) in COMMANDS.items()}

    p["demo"].add_argument("dir", nargs="?", default="campaign-demo", metavar="DIR")
    p["demo"].add_argument("--no-console", action="store_true", help="write and start, but do not open the console")
    p["init"].add_argument("dir", nargs="?", default=".", metavar="DIR")
    p["init"].add_argument("--force", action="store_true", help="overwrite an existing campaign.toml")
    for name in ("check", "plan", "up", "down", "console", "status", "verify", "report", "notify-test", "wrap-up"):
        p[name].add_argument("file", nargs="?", metavar="FILE")
    for name in ("plan", "status", "verify", "report"):
        p[name].add_argument("--json", action="store_true", help="machine-readable output (keys in docs/CLI.md)")
    p["report"].add_argument("--markdown", action="store_true", help="the report as a Markdown page")
    p["up"].add_argument(
        "--host", default=None, metavar="NAME", help="this folder is the declared [[host]] NAME (run over SSH)"
    )
    p["ledger-snapshot"].add_argument("file", nargs="?", metavar="FILE")
    p["ledger-snapshot"].add_argument("out", metavar="OUT", help="the copy to write")
    p["down"].add_argument("--abort-runs", action="store_true", help="abort every active run too")
    p["down"].add_argument("--reason", default=None)
    p["start"].add_argument("args", nargs="+", metavar="[FILE] VARIANT")
    p["abort"].add_argument("args", nargs="+", metavar="[FILE] RUN")
    p["abort"].add_argument("--reason", default=None, help="why (kept in the ledger)")
    p["resume"].add_argument("args", nargs="+", metavar="[FILE] RUN")
    p["decide"].add_argument("args", nargs="+", metavar="[FILE] continue | cut VARIANT... | revisit")
    p["decide"].add_argument("--note", default=None, help="why (kept with the decision)")
    p["checkpoint"].add_argument("path", metavar="PATH")
    p["checkpoint"].add_argument("--json", action="store_true")
    p["wrap-up"].add_argument("--cancel", action="store_true", help="cancel it (runs go on)")
    p["wrap-up"].add_argument("--at", metavar="TIME", help="move it: now, +20m, or 2026-11-29T08:30:00Z")
    p["wrap-up"].add_argument("--json", action="store_true")
    from runner.cli.pull_cmds import add_arguments as add_pull_arguments

    add_pull_arguments(p)
    p["checkpoint"].add_argument(
        "--trust-pickled-module",
        action="store_true",
        help="reload a pickled nn.Module (torch.save(model)) by unpickling: only for files you trust",
    )
    return parser


def _split_file_arg(ns: argparse.Namespace, other: str) -> None:
    """`[FILE] X`: with one argument it is X; with two, FILE then X."""
    args = ns.args
    if len(args) > 2:
        raise CampaignError(f"expected [FILE] {other.upper()}, got {len(args)} arguments")
    ns.file = args[0] if len(args) == 2 else None
    setattr(ns, other, args[-1])


def _version() -> str:
    from runner import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    handler_ref = COMMANDS[ns.command][0]
    try:
        if ns.command == "start":
            _split_file_arg(ns, "variant")
        elif ns.command in ("abort", "resume"):
            _split_file_arg(ns, "run")
        module, func = handler_ref.split(":")
        handler = getattr(importlib.import_module(module), func)
        return int(handler(ns) or 0)
    except CampaignError as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 2
    except RunnerStartFailed as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 2
    except RunnerUnavailable as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:
        from runner.daemon.client import RequestFailed  # not imported up front: `plan` never needs it

        if not isinstance(exc, RequestFailed):
            raise
        # the runner answered and refused (wrap-up --at past the deadline...): bad input (2) or not now (1)
        print(f"campaign: {exc}", file=sys.stderr)
        return 2 if exc.code in ("bad_input", "bad_request") else 1


def file_arg(ns: argparse.Namespace) -> Path | None:
    """The FILE argument as given (None: the default ./campaign.toml)."""
    return Path(ns.file) if getattr(ns, "file", None) else None


if __name__ == "__main__":
    sys.exit(main())
