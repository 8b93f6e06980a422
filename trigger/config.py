"""Trigger service configuration (GROUNDWORK_TRIGGER_*), read by its entry point only."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class TokenGrant(BaseModel):
    """What a bearer token authenticates as."""

    tenant: str
    principal: str
    roles: list[str] = Field(default_factory=list)


class TriggerSettings(BaseSettings):
    # An empty variable is an unset one (docker-compose.yml passes them through as "").
    model_config = SettingsConfigDict(
        env_prefix="GROUNDWORK_TRIGGER_", extra="ignore", env_ignore_empty=True
    )

    host: str = "127.0.0.1"
    port: int = 8080
    tokens: dict[str, TokenGrant] = Field(default_factory=dict)
    """Bearer tokens, JSON: {"tok-123": {"tenant": "acme", "principal": "alice", "roles": ["editor"]}}."""
    webhook_secrets: dict[str, SecretStr] = Field(default_factory=dict)
    """Per-source HMAC secrets for webhooks, JSON: {"github": "..."}."""
    webhook_tenant: str = "default"
    policy: Path | None = None
    """ActivationPolicy YAML; without one every input is PROJECT (recorded only)."""
    max_body_bytes: int = 1024 * 1024
    rate_per_s: float = 200.0
    """Per-token sustained rate; bursts up to `rate_burst`."""
    rate_burst: int = 400
    activation_interval_s: float = 0.2
    cancel_roles: list[str] = Field(default_factory=lambda: ["operator"])
    """Besides the run's own principal, a token with one of these roles may cancel a run."""
    effect_resolver_roles: list[str] = Field(default_factory=lambda: ["operator"])
    """A token needs one of these roles to answer `resolve_effect` over HTTP: saying an
    effect did not happen sends it again, so not every token of the tenant may say it."""
    db_wait_s: float = Field(default=5.0, gt=0)
    """How long a request waits for a Postgres connection before it is answered 503."""
