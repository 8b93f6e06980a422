"""GROUNDWORK_AGENTS entries: a good one joins the catalog; a bad one is refused whole, saying why."""

from __future__ import annotations

import pytest

from contracts.run import ApprovalRule, EffectClass, ToolExecution
from definitions import catalog


@pytest.fixture(autouse=True)
def _clean_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "_loaded", {})


def test_a_loaded_agent_is_built_and_its_policy_pinned_like_a_built_in_one() -> None:
    assert catalog.load({"receipt-sender": "tests.user_agents:build_receipt_sender"}) == [
        "receipt-sender"
    ]
    assert catalog.has("receipt-sender")
    assert "receipt-sender" in catalog.names()
    assert "notes-writer" in catalog.names()
    assert catalog.build("receipt-sender").name == "receipt-sender"
    policy = catalog.policy_snapshot("receipt-sender")
    assert policy["send_receipt"].effect_class is EffectClass.IDEMPOTENT_WRITE
    assert policy["send_receipt"].approval is ApprovalRule.NEVER
    assert policy["order_total"].effect_class is EffectClass.READ
    assert policy["order_total"].execution is ToolExecution.LOCAL


def test_loading_the_same_entries_again_changes_nothing() -> None:
    entries = {"receipt-sender": "tests.user_agents:build_receipt_sender"}
    catalog.load(entries)
    catalog.load(entries)
    assert catalog.names().count("receipt-sender") == 1


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tests.user_agents", "is not 'package.module:factory'"),
        ("tests.no_such_module:build", "cannot import tests.no_such_module"),
        ("tests.user_agents:missing", "has no callable 'missing'"),
        ("tests.user_agents:NOT_CALLABLE", "has no callable 'NOT_CALLABLE'"),
        ("tests.user_agents:not_an_agent", "returned str, not an agents.Agent"),
        ("tests.user_agents:broken", "failed: the receipts service URL is not configured"),
    ],
)
def test_a_bad_entry_is_refused_with_the_reason_and_adds_nothing(path: str, message: str) -> None:
    entries = {"receipt-sender": "tests.user_agents:build_receipt_sender", "bad": path}
    with pytest.raises(catalog.AgentLoadError, match="agent 'bad'") as refused:
        catalog.load(entries)
    assert message in str(refused.value)
    assert not catalog.has("receipt-sender")  # all or nothing
    with pytest.raises(catalog.UnknownAgentError, match="unknown agent 'bad'"):
        catalog.build("bad")


def test_a_built_in_name_cannot_be_taken_over() -> None:
    with pytest.raises(catalog.AgentLoadError, match=r"'notes-writer'.*is built in"):
        catalog.load({"notes-writer": "tests.user_agents:build_receipt_sender"})
    assert catalog.build("notes-writer").name == "notes-writer"


def test_a_loaded_name_cannot_be_pointed_at_another_factory() -> None:
    catalog.load({"receipt-sender": "tests.user_agents:build_receipt_sender"})
    with pytest.raises(catalog.AgentLoadError, match="already loaded from another factory"):
        catalog.load({"receipt-sender": "tests.user_agents:with_hosted_tool"})
