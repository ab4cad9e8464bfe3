import pytest

from leroy.mcp.server import build_server

pytestmark = pytest.mark.anyio

# name: (readOnlyHint, destructiveHint, idempotentHint, openWorldHint), each chosen on purpose:
# lookups and waits only read (a lookup's charge is bookkeeping, and a repeat on the same frame is free);
# creating strategies, hypotheses and jobs adds rows and is not idempotent; cancelling throws queued work away;
# download_market_data asks an external provider.
EXPECTED = {
    "evaluate_current_setup": (True, False, True, False),
    "get_current_confluence_leaders": (True, False, True, False),
    "search_market_memory": (True, False, True, False),
    "compare_historical_analogues": (True, False, True, False),
    "get_market_regime": (True, False, True, False),
    "explain_setup_failure": (True, False, True, False),
    "compare_against_benchmark": (True, False, True, False),
    "simulate_exit_policy": (True, False, True, False),
    "estimate_execution_conditions": (True, False, True, False),
    "get_data_lineage": (True, False, True, False),
    "record_research_hypothesis": (False, False, False, False),
    "review_hypothesis_outcome": (False, False, True, False),
    "get_usage": (True, False, True, False),
    "get_credit_usage": (True, False, True, False),
    "get_strategy_documentation": (True, False, True, False),
    "list_strategies": (True, False, True, False),
    "get_strategy": (True, False, True, False),
    "create_strategy": (False, False, False, False),
    "update_strategy": (False, False, False, False),
    "run_dry_run_backtest": (False, False, False, False),  # runs agent code on a worker: mcp:write
    "list_symbols": (True, False, True, False),
    "search_symbols_by_name": (True, False, True, False),
    "get_symbol": (True, False, True, False),
    "get_market_data_sample": (True, False, True, False),
    "download_market_data": (False, False, True, True),
    "run_backtest": (False, False, False, False),
    "list_reports": (True, False, True, False),
    "get_report": (True, False, True, False),
    "list_report_trades": (True, False, True, False),
    "wait_for_reports": (True, False, True, False),
    "run_optimization": (False, False, False, False),
    "list_optimizations": (True, False, True, False),
    "get_optimization": (True, False, True, False),
    "get_latest_optimization_by_strategy": (True, False, True, False),
    "wait_for_optimization": (True, False, True, False),
    "list_optimization_results": (True, False, True, False),
    "cancel_optimization": (False, True, True, False),
    "run_walk_forward_optimization": (False, False, False, False),
    "get_walk_forward_optimization": (True, False, True, False),
    # alerts: deleting a rule and rotating its secret take away what the caller had; sends reach the receiver.
    "create_evidence_alert": (False, False, False, False),
    "list_evidence_alerts": (True, False, True, False),
    "pause_evidence_alert": (False, False, True, False),
    "resume_evidence_alert": (False, False, True, False),
    "delete_evidence_alert": (False, True, False, False),
    "test_evidence_alert": (False, False, False, True),
    "rotate_evidence_alert_secret": (False, True, False, False),
    "list_alert_deliveries": (True, False, True, False),
    "redeliver_alert_delivery": (False, False, False, True),
    # the publication log: public reads of an append-only log.
    "get_log_checkpoint": (True, False, True, False),
    "get_log_consistency_proof": (True, False, True, False),
    "get_log_inclusion_proof": (True, False, True, False),
    "get_answer_proof": (True, False, True, False),
    # the end-of-day layer: reads of completed snapshots (a subscriber lookup's charge is bookkeeping).
    "get_historical_replay": (True, False, True, False),
    "get_heldout_evidence": (True, False, True, False),
    "get_walk_forward_evidence": (True, False, True, False),
    "list_publication_commitments": (True, False, True, False),
    "get_publication_maturity": (True, False, True, False),
    "get_provenance": (True, False, True, False),
    "get_signal": (True, False, True, False),
    "get_frozen_forward_rows": (True, False, True, False),
    "get_forward_changes_since": (True, False, True, False),
}
TEST_ONLY = {"probe_echo", "probe_whoami", "probe_write", "probe_metered"}


async def test_every_tool_states_each_annotation_hint_on_purpose():
    tools = {t.name: t for t in await build_server().list_tools() if t.name not in TEST_ONLY}

    assert set(tools) == set(EXPECTED)
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None
        assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint) == EXPECTED[
            name
        ], name
