"""Named effect targets a worker can reach, from GROUNDWORK_TARGETS (a JSON object)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from adapters.targets.base import EffectTarget


class TargetConfig(BaseModel):
    """One target: `{"kind": "http", "base_url": ...}`, `{"kind": "git", "path": ...}` or
    `{"kind": "directory", "path": ...}`."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["http", "git", "directory"]
    base_url: str | None = None
    path: Path | None = None
    timeout_s: float = 10.0


class UnknownTargetError(LookupError):
    pass


class TargetRegistry:
    def __init__(self, configs: dict[str, TargetConfig]) -> None:
        self._configs = configs
        self._targets: dict[str, EffectTarget] = {}

    def get(self, name: str) -> EffectTarget:
        target = self._targets.get(name)
        if target is None:
            target = self._build(name)
            target.name = name
            self._targets[name] = target
        return target

    def _build(self, name: str) -> EffectTarget:
        config = self._configs.get(name)
        if config is None:
            known = ", ".join(sorted(self._configs)) or "none"
            raise UnknownTargetError(f"no effect target named {name!r} (configured: {known})")
        if config.kind == "http":
            from adapters.targets.http import HttpTarget

            if not config.base_url:
                raise UnknownTargetError(f"target {name!r}: http needs base_url")
            return HttpTarget(config.base_url, timeout_s=config.timeout_s)
        if config.path is None:
            raise UnknownTargetError(f"target {name!r}: {config.kind} needs path")
        if config.kind == "git":
            from adapters.targets.git_repo import GitRepoTarget, init_repo

            init_repo(config.path)
            return GitRepoTarget(config.path)
        from adapters.targets.filesystem import DirectoryTarget

        return DirectoryTarget(config.path)

    async def close(self) -> None:
        for target in self._targets.values():
            await target.close()
