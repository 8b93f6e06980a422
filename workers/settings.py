"""The one configuration surface: GROUNDWORK_* environment variables, read in entry points only."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.approvals import ApproverConfig
from adapters.targets.registry import TargetConfig

LOCAL_DEFAULTS = "local.json"
LOCAL_EDITOR = "local-editor"


def write_local_defaults(home: Path) -> Path:
    """Create `home/local.json` once: a git docs site under home and a local editor whose
    secret is random and readable by this user only."""
    path = home / LOCAL_DEFAULTS
    if path.exists():
        return path
    home.mkdir(parents=True, exist_ok=True)
    local = {
        "targets": {"docs-site": {"kind": "git", "path": str((home / "docs-site").resolve())}},
        "approvers": {LOCAL_EDITOR: {"secret": secrets.token_hex(32), "roles": ["editor"]}},
        "principal": LOCAL_EDITOR,
    }
    path.touch(mode=0o600)
    path.write_text(json.dumps(local, indent=2))
    return path


class Settings(BaseSettings):
    # An empty variable is an unset one: compose passes `${GROUNDWORK_TARGETS:-}` through as "".
    model_config = SettingsConfigDict(
        env_prefix="GROUNDWORK_", extra="ignore", env_ignore_empty=True
    )

    home: Path = Path(".groundwork")
    """Where the embedded stack keeps its data, logs and state file."""
    temporal_address: str | None = None
    """host:port of an external Temporal; when set, `up` starts no embedded Temporal."""
    temporal_namespace: str = "default"
    temporal_port: int = 7233
    """Port of the embedded Temporal dev server's frontend."""
    ui_port: int = 8233
    """Port of the embedded Temporal Web UI."""
    database_url: str | None = None
    """libpq URL of an external Postgres; when set, `up` starts no embedded Postgres."""
    task_queue: str = "groundwork"
    db_wait_s: float = 30.0
    """How long an activity waits for a Postgres connection (the database restarting, the
    pool exhausted) before it fails and Temporal retries it; the retry reconciles first."""
    max_concurrent_activities: int = 100
    max_cached_workflows: int = 1000
    """Runs a worker keeps in memory (~0.4 MB each, measured); evicted runs replay on resume."""
    sticky_timeout_s: float = 10.0
    """How long a run's next workflow task waits for the worker that has it cached before
    any worker takes it (and replays). Lower means faster recovery from a dead worker."""
    openai_base_url: str | None = None
    compatible_api_key: str | None = None
    """Key for `openai-compatible:` servers; the OpenAI key is never sent to them."""
    scripts_dir: Path | None = None
    scripted_call_log: Path | None = None
    agents: dict[str, str] = Field(default_factory=dict)
    """Agents beyond the built-in catalog, as JSON: {"my-agent": "my_pkg.agents:build_agent"}
    (a module the worker can import, and a function of no arguments returning an Agent)."""
    targets: dict[str, TargetConfig] = Field(default_factory=dict)
    """Effect targets by name, as JSON: {"notes": {"kind": "git", "path": "/srv/notes"}}."""
    approvers: dict[str, ApproverConfig] = Field(default_factory=dict)
    """Approvers by principal, as JSON: {"alice": {"secret": "...", "roles": ["editor"]}}."""
    principal: str | None = None
    """Who this CLI acts as when it signs approval decisions."""
    log_level: str = "INFO"
    web_ui_url: str | None = None
    """Base URL of the Web UI for printed links; defaults to the embedded UI."""
    openai_api_key: str | None = Field(default=None, validation_alias="OPENAI_API_KEY")

    @model_validator(mode="after")
    def _embedded_defaults(self) -> Settings:
        """The embedded stack's local defaults (`home/local.json`, written by `up`): a docs-site
        target and a local editor, so `make demo` publishes and approves with no configuration.
        Anything set through GROUNDWORK_* wins; an external deployment has no such file."""
        path = self.home / LOCAL_DEFAULTS
        if not path.is_file():
            return self
        try:
            local: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return self
        for name, config in (local.get("targets") or {}).items():
            self.targets.setdefault(name, TargetConfig.model_validate(config))
        for name, config in (local.get("approvers") or {}).items():
            self.approvers.setdefault(name, ApproverConfig.model_validate(config))
        if self.principal is None and isinstance(local.get("principal"), str):
            self.principal = local["principal"]
        return self

    @property
    def state_file(self) -> Path:
        return self.home / "stack.json"

    def ui_base(self) -> str:
        return self.web_ui_url or f"http://localhost:{self.ui_port}"

    def run_url(self, workflow_id: str) -> str:
        return f"{self.ui_base()}/namespaces/{self.temporal_namespace}/workflows/{workflow_id}"
