"""The public surface of the runtime packages is pinned: widening it is a visible decision (STYLE §2)."""

from __future__ import annotations

import importlib

import pytest

SURFACES = {
    "dsh.loader.agent": [
        "Agent", "AgentOptions", "AgentRegistry", "FoldResult", "Idle", "Inbox", "MISSING", "Maintenance",
        "Message", "PreStep", "RunOutcome", "Running", "STOP_REASONS", "StopReason", "Target", "Tool",
        "ToolExec", "ToolOutput", "epoch_stop_reason", "final_output", "fold_consumed_work",
        "one_shot_stop_reason", "run_outcome", "text_block", "text_of", "tool_result_message", "user_message",
    ],
    "dsh.loader.subagents": [
        "Activation", "AgentFactory", "AncestorAuthority", "Authority", "Catalogue", "CatalogueEntry",
        "ChildLock", "ContinuationManager", "ManagerConfig", "Materialization", "OneShotResult",
        "UserAuthority", "dispose", "drain", "drain_children", "drain_descendants", "interrupt",
        "list_agents", "notify_settlement", "render_settlement_notice", "report_from", "run_one_shot",
        "settlement_message", "state_of", "status_of",
        # issue 9: durable epochs, notice ids and the resume pass
        "EPOCH_EVENT", "continuation_message", "holds_message", "notice_id", "plan_recovery", "recover",
        "scan_tree", "turn_cut_off",
        # issue 12: the report message both engines send
        "report_message",
    ],
    "dsh.loader.tools": [
        "InterruptAgentTool", "ListAgentsTool", "ReportTool", "SendMessageTool", "SubagentTool", "TOOL_PARAMETERS",
        "lint_transcript", "tools_for",
        # issue 12: the backend `subagent` and `report` act through (local manager or Temporal)
        "Delegation",
    ],
    "dsh.loader.session": [
        "EVENT_TYPES", "ErrorData", "Event", "FileIO", "LoggedRequest", "PruneOutcome", "REQUEUED", "ReadResult",
        "RequestLog", "Session",
        "SessionStore", "StoreIO", "TurnEnd", "TurnEndKind", "interrupted_turn_closers", "is_unmaterialized",
        "logged_requests", "make_header", "open_regular", "prune_tree", "prune_unmaterialized", "read", "replay_inbox", "unmaterialized_ids", "validate_log",
        # issue 13: the text `append` would make, made once (`snapshot`) or formatted for fixed shapes
        "snapshot", "insertion_text", "removal_text", "step_text", "turn_end_text", "turn_text",
    ],
    "dsh.loader.headless": [
        "EXIT_CODES", "Quiescence", "RunRequest", "RunResult", "RunSinks", "Tree", "exit_code_for",
        "quiescence", "run_tree",
        # issue 12: the Temporal engine builds the same system prompt and `init` record
        "system_prompt", "init_record",
    ],
}


@pytest.mark.parametrize("module", sorted(SURFACES))
def test_public_surface_is_pinned(module):
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(SURFACES[module])
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name} is exported but missing"
