"""Continuation manager and its satellites (SPEC §8–§11): residency, notices, interrupt, report."""

from dsh.loader.subagents.activation import Activation, state_of
from dsh.loader.subagents.epochs import EPOCH_EVENT, holds_message, notice_id
from dsh.loader.subagents.interrupt import AncestorAuthority, Authority, UserAuthority, interrupt
from dsh.loader.subagents.listing import Catalogue, CatalogueEntry, list_agents, status_of
from dsh.loader.subagents.lock import ChildLock
from dsh.loader.subagents.manager import AgentFactory, ContinuationManager, ManagerConfig, Materialization
from dsh.loader.subagents.notice import notify_settlement, render_settlement_notice, settlement_message
from dsh.loader.subagents.recovery import continuation_message, plan_recovery, recover, scan_tree, turn_cut_off
from dsh.loader.subagents.oneshot import OneShotResult, run_one_shot
from dsh.loader.subagents.report import report_from, report_message
from dsh.loader.subagents.teardown import dispose, drain, drain_children, drain_descendants

__all__ = [
    "EPOCH_EVENT",
    "Activation",
    "AgentFactory",
    "AncestorAuthority",
    "Authority",
    "Catalogue",
    "CatalogueEntry",
    "ChildLock",
    "ContinuationManager",
    "continuation_message",
    "ManagerConfig",
    "Materialization",
    "OneShotResult",
    "UserAuthority",
    "dispose",
    "drain",
    "drain_children",
    "drain_descendants",
    "holds_message",
    "interrupt",
    "list_agents",
    "notice_id",
    "notify_settlement",
    "plan_recovery",
    "recover",
    "render_settlement_notice",
    "report_from",
    "report_message",
    "run_one_shot",
    "scan_tree",
    "settlement_message",
    "state_of",
    "status_of",
    "turn_cut_off",
]
