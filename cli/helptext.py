"""Help-page texts (issue 11 item 3): one example epilog per command, and `dsh run`'s exit codes.

The pages render in click's plain format (`rich_markup_mode=None` on every Typer app): a boolean
is a bare flag (`--json`, not `--json <bool>`), the text is the same with or without colour, and
`--help` does not import rich. A paragraph that starts with a `\\b` line is printed as written
(click's no-rewrap marker), which keeps the tables and example commands on their own lines.

Metavars are one vocabulary: `TASK`, `ADDRESS` (`<parentSessionId>/<childSessionId>`), `MESSAGE`,
`SESSION_ID`, `NAME` (a shipped name or a path), `FILE`, `DIR`, `SECONDS`, `N`.
"""

from __future__ import annotations

__all__ = ["EPILOGS", "HOME_DEFAULT", "PROFILE_DEFAULT", "default", "examples"]

# `--profile`'s default, as `loader.config.compose` resolves it (SPEC §14.2, §25 item 12).
PROFILE_DEFAULT = "$DSH_PROFILE, else 'test' under --transcript, else 'default'"
HOME_DEFAULT = "$DSH_HOME, else ~/.dsh"


def default(text: str) -> str:
    """A default that is a rule, not a value, in click's own `[default: …]` form (typer would
    parenthesise a `show_default` string)."""
    return f"  [default: {text}]"


def examples(*lines: str) -> str:
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


RUN_EXIT_CODES = "\n".join([
    "\b",
    "Exit codes:",
    "  0    the root completed, no violations",
    "  1    the root ended with an error, a transcript/fence violation, an exhausted run budget,",
    "       or an internal error",
    "  2    usage or configuration error (nothing ran)",
    "  3    the root hit its output token limit (max-tokens)",
    "  4    the root was aborted (also --timeout)",
    "  5    the root's turn was refused",
    "  130  interrupted by Ctrl-C (SIGINT); 143 stopped by SIGTERM",
    "  Precedence: 130/143 > 2 > violations (1) > the root's stop reason.",
])

EPILOGS: dict[str, str] = {
    "dsh": examples(
        "dsh run 'Summarise README.md'",
        "dsh run --transcript hello",
        "dsh sessions list",
        "dsh interrupt ROOT_ID/CHILD_ID",
    ),
    "run": examples(
        "dsh run 'Summarise README.md'",
        "echo 'Summarise README.md' | dsh run -",
        "dsh run --transcript hello --json | jq -c 'select(.type == \"result\")'",
        "dsh run --transcript interrupt-demo --parked wait   # then: dsh interrupt ADDRESS",
        "dsh run --resume last",
    ) + "\n\n" + RUN_EXIT_CODES,
    "interrupt": examples(
        "dsh interrupt session-1c0f.../7a2e...",
        "(the address is on the live tree, in the waiting line, and in --json's waiting record)",
    ) + "\n\n\b\nExit codes: 0 accepted (also when no run hosts the child); 1 unauthorized or RPC failure;\n"
        "2 bad address or unknown session.",
    "send": examples(
        "dsh send session-1c0f.../7a2e... 'Now summarise what you found.'",
    ) + "\n\n\b\nExit codes: 0 queued (prints the message id); 1 no live run or RPC failure;\n"
        "2 bad address or unknown session.",
    "flow": examples(
        "dsh flow hello",
        "dsh flow background-settlement --repeat 5",
        "dsh flow hello --check tests/__snapshots__",
    ),
    "worker": examples(
        "temporal server start-dev --headless   # the `temporal` extra ships this binary",
        "dsh worker",
        "dsh run --engine temporal --transcript hello",
    ),
    "sessions list": examples("dsh sessions list", "dsh sessions list --json | jq -r .id"),
    "sessions show": examples("dsh sessions show SESSION_ID", "dsh sessions show SESSION_ID --json"),
    "sessions tree": examples("dsh sessions tree SESSION_ID"),
    "sessions prune": examples("dsh sessions prune --unmaterialized --dry-run"),
    "config show": examples(
        "dsh config show",
        "dsh config show --profile test --overlay quiet-reports",
        "dsh config show --model deepseek-reasoner --json",
    ),
}
