"""Agent core (SPEC §6, §7): phases, inbox, driver, turns, steps, tools, fold."""

from dsh.loader.agent.agent import Agent, AgentOptions
from dsh.loader.agent.fold import (
    MISSING,
    STOP_REASONS,
    FoldResult,
    RunOutcome,
    StopReason,
    epoch_stop_reason,
    final_output,
    fold_consumed_work,
    one_shot_stop_reason,
    run_outcome,
)
from dsh.loader.agent.inbox import Inbox, Message, Target
from dsh.loader.agent.messages import text_block, text_of, tool_result_message, user_message
from dsh.loader.agent.phase import Idle, Maintenance, PreStep, Running
from dsh.loader.agent.registry import AgentRegistry
from dsh.loader.agent.tooling import Tool, ToolExec, ToolOutput

__all__ = [
    "MISSING",
    "STOP_REASONS",
    "Agent",
    "AgentOptions",
    "AgentRegistry",
    "FoldResult",
    "Idle",
    "Inbox",
    "Maintenance",
    "Message",
    "PreStep",
    "RunOutcome",
    "Running",
    "StopReason",
    "Target",
    "Tool",
    "ToolExec",
    "ToolOutput",
    "epoch_stop_reason",
    "final_output",
    "fold_consumed_work",
    "one_shot_stop_reason",
    "run_outcome",
    "text_block",
    "text_of",
    "tool_result_message",
    "user_message",
]
