"""GROUNDWORK_* parsing where a deployment passes variables through (docker-compose.yml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trigger.config import TriggerSettings
from workers.settings import Settings


def test_an_empty_variable_is_unset_and_a_set_one_is_parsed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # compose passes `GROUNDWORK_TARGETS: ${GROUNDWORK_TARGETS:-}` through as "" when unset
    monkeypatch.setenv("GROUNDWORK_HOME", str(tmp_path))
    for name in ("TARGETS", "AGENTS", "APPROVERS", "DATABASE_URL"):
        monkeypatch.setenv(f"GROUNDWORK_{name}", "")
    empty = Settings()
    assert empty.targets == {}
    assert empty.agents == {}
    assert empty.approvers == {}
    assert empty.database_url is None

    monkeypatch.setenv(
        "GROUNDWORK_AGENTS", '{"receipt-sender": "tests.user_agents:build_receipt_sender"}'
    )
    monkeypatch.setenv(
        "GROUNDWORK_TARGETS", '{"receipts": {"kind": "http", "base_url": "http://t:1"}}'
    )
    parsed = Settings()
    assert parsed.agents == {"receipt-sender": "tests.user_agents:build_receipt_sender"}
    assert parsed.targets["receipts"].kind == "http"


def test_a_malformed_variable_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GROUNDWORK_HOME", str(tmp_path))
    monkeypatch.setenv("GROUNDWORK_AGENTS", "receipt-sender")
    with pytest.raises(Exception, match="agents"):
        Settings()


def test_the_trigger_settings_take_an_empty_variable_as_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docker-compose.yml passes GROUNDWORK_TRIGGER_TOKENS and the cancel / resolver roles
    # through as "" when the shell does not set them
    for name in ("TOKENS", "WEBHOOK_SECRETS", "CANCEL_ROLES", "EFFECT_RESOLVER_ROLES"):
        monkeypatch.setenv(f"GROUNDWORK_TRIGGER_{name}", "")
    trigger = TriggerSettings()
    assert trigger.tokens == {}
    assert trigger.webhook_secrets == {}
    assert trigger.cancel_roles == ["operator"]
    assert trigger.effect_resolver_roles == ["operator"]
