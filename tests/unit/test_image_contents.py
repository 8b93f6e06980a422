"""The deployment image holds every package the project ships, and the CLI imports from them alone.

The Dockerfile copies packages one by one behind an allow-list .dockerignore; a package
left out of either builds fine and fails at `groundwork ...` in the container. `trigger/`
was left out once: every command in the image died with `No module named 'trigger'`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.helpers import ROOT


def _shipped_packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(pattern.rstrip("*") for pattern in include)


def _copied() -> set[str]:
    dockerfile = (ROOT / "Dockerfile").read_text()
    return {m.group(1) for m in re.finditer(r"^COPY (\w+)/ \1/$", dockerfile, flags=re.M)}


def _allowed() -> set[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


def test_every_shipped_package_is_copied_into_the_image_and_let_through() -> None:
    packages = _shipped_packages()
    assert "trigger" in packages
    assert set(packages) <= _copied(), sorted(set(packages) - _copied())
    assert set(packages) <= _allowed(), sorted(set(packages) - _allowed())


def test_the_cli_imports_from_the_image_files_alone(tmp_path: Path) -> None:
    for package in _copied():
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    # Only the copied tree and the installed dependencies: no repository root, no editable finder.
    probe = (
        "import sys\n"
        f"sys.path = [{str(tmp_path)!r}] + [p for p in sys.path if p and p != {str(ROOT)!r}]\n"
        "sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "import cli.main, workers.worker, trigger.app\n"
        "print(cli.main.__file__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(tmp_path / "cli" / "main.py")
