"""The three effect targets against real things: a service process, a git repo, a directory.

Each target must create an effect once per key, refuse the same key with another request,
and answer `reconcile` from its own state. The HTTP service's faults reproduce what makes
reconciliation necessary: a commit whose response is lost, a hang, a 5xx, a blind lookup.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from adapters.targets import (
    Committed,
    NotCommitted,
    TargetConflictError,
    TargetRejectedError,
    TargetTransientError,
    TargetUnknownError,
    Unknown,
)
from adapters.targets.filesystem import DirectoryTarget
from adapters.targets.git_repo import GitRepoTarget, git_env, init_repo, tag_name
from adapters.targets.http import HttpTarget
from cli.target_commands import target_app
from tests.helpers import target_service


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}:r1:docs"


# -- the HTTP service as a real process -------------------------------------------------


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with target_service(tmp_path_factory.mktemp("http-target") / "target.sqlite") as url:
        yield url


async def _control(url: str, method: str, path: str, body: Any = None) -> Any:
    async with httpx2.AsyncClient(trust_env=False) as client:
        response = await client.request(method, f"{url}{path}", json=body)
        response.raise_for_status()
        return response.json()


async def _commits(url: str, key: str) -> int:
    stats = await _control(url, "GET", "/stats")
    return int(stats["commits"].get(key, 0))


@pytest.fixture
async def http_target(service_url: str) -> AsyncIterator[HttpTarget]:
    target = HttpTarget(service_url, timeout_s=5.0)
    yield target
    await target.close()
    await _control(service_url, "DELETE", "/faults")


async def test_http_executes_once_per_key(http_target: HttpTarget, service_url: str) -> None:
    key, request_hash = _key("http-once"), _hash("v1")
    assert await http_target.reconcile(key) == NotCommitted()
    first = await http_target.execute(key, request_hash, {"title": "hello"})
    again = await http_target.execute(key, request_hash, {"title": "hello"})
    assert first.details["created"] is True
    assert again.details["created"] is False
    assert again.external_ref == first.external_ref
    assert await _commits(service_url, key) == 1
    found = await http_target.reconcile(key)
    assert isinstance(found, Committed)
    assert (found.external_ref, found.request_hash) == (first.external_ref, request_hash)


async def test_http_same_key_other_request_conflicts(
    http_target: HttpTarget, service_url: str
) -> None:
    key = _key("http-conflict")
    await http_target.execute(key, _hash("v1"), {"n": 1})
    with pytest.raises(TargetConflictError):
        await http_target.execute(key, _hash("v2"), {"n": 2})
    assert await _commits(service_url, key) == 1


async def test_http_commit_then_drop_is_unknown_then_reconciles(
    http_target: HttpTarget, service_url: str
) -> None:
    key, request_hash = _key("http-drop"), _hash("v1")
    await _control(service_url, "POST", "/faults", {"mode": "commit_then_drop", "key_prefix": key})
    with pytest.raises(TargetUnknownError):
        await http_target.execute(key, request_hash, {"n": 1})
    found = await http_target.reconcile(key)
    assert isinstance(found, Committed)
    assert found.request_hash == request_hash
    retried = await http_target.execute(key, request_hash, {"n": 1})
    assert retried.external_ref == found.external_ref
    assert await _commits(service_url, key) == 1


async def test_http_drop_before_commit_is_unknown_and_not_committed(
    http_target: HttpTarget, service_url: str
) -> None:
    key = _key("http-predrop")
    await _control(
        service_url, "POST", "/faults", {"mode": "drop_before_commit", "key_prefix": key}
    )
    with pytest.raises(TargetUnknownError):
        await http_target.execute(key, _hash("v1"), {"n": 1})
    assert await http_target.reconcile(key) == NotCommitted()
    assert await _commits(service_url, key) == 0


async def test_http_5xx_is_transient_and_commits_nothing(
    http_target: HttpTarget, service_url: str
) -> None:
    key = _key("http-5xx")
    await _control(service_url, "POST", "/faults", {"mode": "error_5xx", "key_prefix": key})
    with pytest.raises(TargetTransientError):
        await http_target.execute(key, _hash("v1"), {"n": 1})
    assert await http_target.reconcile(key) == NotCommitted()
    assert await _commits(service_url, key) == 0


async def test_http_hang_past_timeout_is_unknown_and_commits_later(service_url: str) -> None:
    key, request_hash = _key("http-hang"), _hash("v1")
    await _control(
        service_url, "POST", "/faults", {"mode": "hang", "hang_s": 0.8, "key_prefix": key}
    )
    impatient = HttpTarget(service_url, timeout_s=0.2)
    try:
        with pytest.raises(TargetUnknownError):
            await impatient.execute(key, request_hash, {"n": 1})
        found = await impatient.reconcile(key)
        for _ in range(40):
            if isinstance(found, Committed):
                break
            await asyncio.sleep(0.05)
            found = await impatient.reconcile(key)
        assert isinstance(found, Committed)
    finally:
        await impatient.close()
        await _control(service_url, "DELETE", "/faults")
    assert await _commits(service_url, key) == 1


async def test_http_lookup_unknown(http_target: HttpTarget, service_url: str) -> None:
    key = _key("http-blind")
    await http_target.execute(key, _hash("v1"), {"n": 1})
    await _control(service_url, "POST", "/faults", {"mode": "lookup_unknown", "key_prefix": key})
    assert (await _control(service_url, "GET", "/faults"))["faults"][0]["mode"] == "lookup_unknown"
    assert isinstance(await http_target.reconcile(key), Unknown)
    assert isinstance(await http_target.reconcile(key), Committed)  # the fault was used up


async def test_http_unreachable_and_wrong_url(service_url: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    refused = HttpTarget(f"http://127.0.0.1:{port}", timeout_s=1.0)
    wrong = HttpTarget(f"{service_url}/not-the-api")
    try:
        with pytest.raises(TargetTransientError):
            await refused.execute(_key("http-refused"), _hash("v1"), {})
        assert isinstance(await refused.reconcile("any"), Unknown)
        # A 404 that is not the service's `not_found` must never read as "not committed".
        assert isinstance(await wrong.reconcile("any"), Unknown)
        with pytest.raises(TargetRejectedError):
            await wrong.execute(_key("http-wrong"), _hash("v1"), {})
        with pytest.raises(TargetRejectedError):
            await refused.execute("clé\nnewline", _hash("v1"), {})
    finally:
        await refused.close()
        await wrong.close()


async def test_http_service_restart_keeps_commits(tmp_path: Path) -> None:
    db = tmp_path / "restart.sqlite"
    key, request_hash = _key("http-restart"), _hash("v1")
    with target_service(db) as url:
        target = HttpTarget(url)
        first = await target.execute(key, request_hash, {"n": 1})
        await target.close()
    with target_service(db) as url:
        target = HttpTarget(url)
        try:
            found = await target.reconcile(key)
            assert isinstance(found, Committed)
            assert found.external_ref == first.external_ref
            again = await target.execute(key, request_hash, {"n": 1})
            assert again.details["created"] is False
            assert await _commits(url, key) == 1
        finally:
            await target.close()


def test_target_serve_names_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            target_app, ["serve", "--port", str(port), "--db", str(tmp_path / "t.sqlite")]
        )
    assert result.exit_code == 1
    assert f"port {port} is already in use" in result.output


# -- git --------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=git_env(), capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "site")


def _article(text: str) -> dict[str, Any]:
    return {"path": "articles/x.md", "content": text, "message": "Publish article x"}


async def test_git_commits_and_tags_once_per_key(repo: Path) -> None:
    target = GitRepoTarget(repo)
    key, request_hash = _key("git-once"), _hash("v1")
    assert await target.reconcile(key) == NotCommitted()
    first = await target.execute(key, request_hash, _article("# Hello\n"))
    again = await target.execute(key, request_hash, _article("# Hello\n"))
    assert again.external_ref == first.external_ref
    assert first.external_ref.startswith(f"{tag_name(key)}@")
    assert _git(repo, "tag", "-l", "gw/*").split() == [tag_name(key)]
    assert len(_git(repo, "log", "--format=%H").split()) == 2  # initial commit + the effect
    assert (repo / "articles/x.md").read_text() == "# Hello\n"
    assert "Groundwork <groundwork@localhost>" in _git(repo, "log", "-1", "--format=%an <%ae>")
    found = await target.reconcile(key)
    assert isinstance(found, Committed)
    assert (found.external_ref, found.request_hash) == (first.external_ref, request_hash)
    assert key in _git(repo, "tag", "-l", "-n9", tag_name(key))


async def test_git_same_key_other_request_conflicts(repo: Path) -> None:
    target = GitRepoTarget(repo)
    key = _key("git-conflict")
    await target.execute(key, _hash("v1"), _article("one"))
    with pytest.raises(TargetConflictError):
        await target.execute(key, _hash("v2"), _article("two"))
    assert (repo / "articles/x.md").read_text() == "one"


async def test_git_concurrent_same_key_makes_one_commit(repo: Path) -> None:
    key, request_hash = _key("git-race"), _hash("v1")
    results = await asyncio.gather(
        *(GitRepoTarget(repo).execute(key, request_hash, _article("race")) for _ in range(2))
    )
    assert results[0].external_ref == results[1].external_ref
    assert len(_git(repo, "tag", "-l", "gw/*").split()) == 1
    assert len(_git(repo, "log", "--format=%H").split()) == 2


async def test_git_concurrent_keys_do_not_interleave(repo: Path) -> None:
    target = GitRepoTarget(repo)
    keys = [_key(f"git-many{i}") for i in range(4)]
    await asyncio.gather(
        *(
            target.execute(key, _hash(key), {"path": f"a/{i}.md", "content": key})
            for i, key in enumerate(keys)
        )
    )
    assert sorted(_git(repo, "tag", "-l", "gw/*").split()) == sorted(map(tag_name, keys))
    for i, key in enumerate(keys):  # every effect commit holds exactly its own file
        changed = _git(
            repo, "show", "--name-only", "--format=", f"refs/tags/{tag_name(key)}^{{commit}}"
        )
        assert changed.split() == [f"a/{i}.md"]


async def test_git_adopts_a_commit_whose_tag_was_lost(repo: Path) -> None:
    """A crash between commit and tag: the retry tags the existing commit, no second commit."""
    target = GitRepoTarget(repo)
    key, request_hash = _key("git-orphan"), _hash("v1")
    first = await target.execute(key, request_hash, _article("orphan"))
    _git(repo, "tag", "-d", tag_name(key))
    assert await target.reconcile(key) == NotCommitted()
    retried = await target.execute(key, request_hash, _article("orphan"))
    assert retried.external_ref == first.external_ref
    assert len(_git(repo, "log", "--format=%H").split()) == 2


async def test_git_rejects_paths_outside_the_work_tree(repo: Path) -> None:
    target = GitRepoTarget(repo)
    for path in ("../escape.md", "/etc/passwd", ".git/config", "articles/../../x"):
        with pytest.raises(TargetRejectedError):
            await target.execute(_key("git-bad"), _hash("v1"), {"path": path, "content": "x"})


def test_tag_names_are_valid_refs_for_odd_keys(tmp_path: Path) -> None:
    keys = ["article-42:r7:abc:docs-site", "../..lock", "a b~c^d:e?f*g[h\\i", "@{x}", "é/ü", ".x."]
    names = {tag_name(key) for key in keys}
    assert len(names) == len(keys)
    for name in names:
        subprocess.run(["git", "check-ref-format", f"refs/tags/{name}"], check=True)


# -- a directory ------------------------------------------------------------------------


async def test_directory_writes_once_per_key(tmp_path: Path) -> None:
    target = DirectoryTarget(tmp_path / "out")
    key, request_hash = _key("fs-once"), _hash("v1")
    payload = {"path": "site/x.md", "content": "hello"}
    assert await target.reconcile(key) == NotCommitted()
    first = await target.execute(key, request_hash, payload)
    again = await target.execute(key, request_hash, payload)
    assert again.external_ref == first.external_ref
    assert (tmp_path / "out/site/x.md").read_text() == "hello"
    assert len(list((tmp_path / "out/.effects").glob("*.json"))) == 1
    found = await target.reconcile(key)
    assert isinstance(found, Committed)
    assert (found.external_ref, found.request_hash) == (first.external_ref, request_hash)
    with pytest.raises(TargetConflictError):
        await target.execute(key, _hash("v2"), {"path": "site/x.md", "content": "other"})
    assert (tmp_path / "out/site/x.md").read_text() == "hello"
    assert not list((tmp_path / "out/site").glob("*.gw-tmp"))


async def test_directory_concurrent_requests_for_one_key(tmp_path: Path) -> None:
    target = DirectoryTarget(tmp_path / "out")
    key = _key("fs-race")
    outcomes = await asyncio.gather(
        target.execute(key, _hash("v1"), {"path": "x.md", "content": "one"}),
        target.execute(key, _hash("v2"), {"path": "x.md", "content": "two"}),
        return_exceptions=True,
    )
    assert sorted(type(o).__name__ for o in outcomes) == ["Committed", "TargetConflictError"]
    winner = next(o for o in outcomes if isinstance(o, Committed))
    expected = "one" if winner.request_hash == _hash("v1") else "two"
    assert (tmp_path / "out/x.md").read_text() == expected


async def test_directory_reconcile_judges_the_file(tmp_path: Path) -> None:
    root = tmp_path / "out"
    target = DirectoryTarget(root)
    # Content in place but no manifest: a crash before the manifest, so not committed.
    (root / "a.md").parent.mkdir(parents=True)
    (root / "a.md").write_text("draft")
    crashed = _key("fs-crash")
    assert await target.reconcile(crashed) == NotCommitted()
    await target.execute(crashed, _hash("v1"), {"path": "a.md", "content": "draft"})
    assert isinstance(await target.reconcile(crashed), Committed)
    # A later effect on the same path explains the new content: still committed.
    r7, r8 = _key("fs-r7"), _key("fs-r8")
    await target.execute(r7, _hash("r7"), {"path": "b.md", "content": "seven"})
    await target.execute(r8, _hash("r8"), {"path": "b.md", "content": "eight"})
    superseded = await target.reconcile(r7)
    assert isinstance(superseded, Committed)
    assert superseded.details["superseded_by"] == r8
    # Edited or deleted by hand: the target cannot vouch for the effect any more.
    (root / "b.md").write_text("hand edit")
    assert isinstance(await target.reconcile(r8), Unknown)
    os.remove(root / "a.md")
    assert isinstance(await target.reconcile(crashed), Unknown)


async def test_directory_rejects_escaping_paths(tmp_path: Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    target = DirectoryTarget(root)
    for path in ("../x", "/etc/passwd", ".effects/evil.json", "link/x", "", "."):
        with pytest.raises(TargetRejectedError):
            await target.execute(_key("fs-bad"), _hash("v1"), {"path": path, "content": "x"})
    assert not (tmp_path / "x").exists()
