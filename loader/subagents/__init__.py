"""Continuation manager and its satellites (SPEC §8–§11): residency, notices, interrupt, report."""

from loader.subagents.activation import Activation, state_of
from loader.subagents.interrupt import AncestorAuthority, Authority, UserAuthority, interrupt
from loader.subagents.listing import Catalogue, CatalogueEntry, list_agents, status_of
from loader.subagents.lock import ChildLock
from loader.subagents.manager import AgentFactory, ContinuationManager, ManagerConfig, Materialization
from loader.subagents.notice import notify_settlement, render_settlement_notice, settlement_message
from loader.subagents.oneshot import OneShotResult, run_one_shot
from loader.subagents.report import report_from
from loader.subagents.teardown import dispose, drain, drain_children, drain_descendants

__all__ = [
    "Activation",
    "AgentFactory",
    "AncestorAuthority",
    "Authority",
    "Catalogue",
    "CatalogueEntry",
    "ChildLock",
    "ContinuationManager",
    "ManagerConfig",
    "Materialization",
    "OneShotResult",
    "UserAuthority",
    "dispose",
    "drain",
    "drain_children",
    "drain_descendants",
    "interrupt",
    "list_agents",
    "notify_settlement",
    "render_settlement_notice",
    "report_from",
    "run_one_shot",
    "settlement_message",
    "state_of",
    "status_of",
]
