"""ActivationPolicy: rules that map an input to a disposition, loaded from a YAML file.

```yaml
rules:
  - match: {kind: command, type: "research.*"}     # kind, type, source, subject; globs allowed
    action: ACTIVATE
    agent: source-reader
    model_route: scripted:source-reader-demo
  - match: {kind: command, type: "chat.message"}
    action: ENQUEUE                                   # the session runs it after what is queued
    agent: source-reader
  - match: {kind: command, type: "chat.stop_and_do"}
    action: INTERRUPT                                 # cancel the session's active run, run next
    agent: source-reader
  - match: {kind: command, type: "chat.correction"}
    action: STEER                                     # into the active run, else queued
    agent: source-reader
  - match: {kind: event}
    action: RESUME                                    # deliver to waiting runs' subscriptions
default: PROJECT                                      # record only
```
First matching rule wins. ACTIVATE, ENQUEUE, STEER and INTERRUPT start runs and name the
agent (and optionally the model route) to run.

ENQUEUE, STEER and INTERRUPT go to the input's session: its `target` when the envelope
has one, else its `subject`. One SessionWorkflow per (tenant, session id) serializes the
session's runs (workflows/session.py). ACTIVATE starts a run of its own, outside any
session's order. FORK needs a runtime that can fork; a policy naming it is accepted, and
inputs it maps there are answered 501 (nothing stored).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.inputs import AgentInput, Disposition

NOT_YET = frozenset({Disposition.FORK})
SESSION_ACTIONS = frozenset({Disposition.ENQUEUE, Disposition.STEER, Disposition.INTERRUPT})
RUN_ACTIONS = frozenset({Disposition.ACTIVATE, *SESSION_ACTIONS})


def session_of(target: str | None, subject: str) -> str:
    """The session an input belongs to: its `target` when given, else its `subject`."""
    return target or subject


class Match(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str | None = None
    type: str | None = None
    source: str | None = None
    subject: str | None = None

    def matches(self, values: dict[str, str]) -> bool:
        for name, pattern in self.model_dump(exclude_none=True).items():
            if not fnmatchcase(values[name], pattern):
                return False
        return True


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: Match = Field(default_factory=Match)
    action: Disposition
    agent: str | None = None
    model_route: str | None = None

    @model_validator(mode="after")
    def _activate_names_an_agent(self) -> Rule:
        if self.action in RUN_ACTIONS and not self.agent:
            raise ValueError(f"an {self.action.value} rule needs `agent`")
        if self.action is Disposition.PENDING:
            raise ValueError("`pending` is not an action")
        return self


class ActivationPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(default_factory=list)
    default: Disposition = Disposition.PROJECT

    def decide(self, envelope: AgentInput) -> Rule:
        return self.decide_for(
            envelope.kind.value, envelope.type, envelope.source, envelope.subject
        )

    def decide_for(self, kind: str, type_: str, source: str, subject: str) -> Rule:
        """The first matching rule for a stored input's fields, else the default."""
        values = {"kind": kind, "type": type_, "source": source, "subject": subject}
        for rule in self.rules:
            if rule.match.matches(values):
                return rule
        return Rule(action=self.default, agent=None)

    @classmethod
    def load(cls, path: Path) -> ActivationPolicy:
        return cls.model_validate(yaml.safe_load(path.read_text()) or {})
