"""scripts/start.sh on machines where the .venv is not what it should be: a half-made
one (Debian/Ubuntu's Python without python3-venv), one made before the checkout was
moved, a Python that cannot make one at all.  The install itself is kept offline
(PIP_NO_INDEX) and may fail: what counts is how the venv step behaves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checkout(where: Path) -> Path:
    shutil.copytree(ROOT / "scripts", where / "scripts")
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def _start(repo: Path, path: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": str(home), "PIP_NO_INDEX": "1"}
    return subprocess.run(
        ["bash", "scripts/start.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_half_made_venv_is_made_again(tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "parley")
    # what `python3 -m venv .venv` leaves behind when ensurepip is missing
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").symlink_to(sys.executable)
    r = _start(repo, os.environ["PATH"], tmp_path)
    assert "No such file or directory" not in r.stderr, r.stderr
    assert "making it again" in r.stderr
    assert (repo / ".venv" / "bin" / "activate").is_file()
    assert (repo / ".venv" / "bin" / "pip").exists()


def test_a_moved_checkout_gets_a_venv_of_its_own(tmp_path: Path) -> None:
    old, new = tmp_path / "parley", tmp_path / "parley-bot"
    _checkout(old)
    subprocess.run([sys.executable, "-m", "venv", str(old / ".venv")], check=True)
    old.rename(new)
    r = _start(new, os.environ["PATH"], tmp_path)
    assert "command not found" not in r.stderr, r.stderr
    assert r.returncode != 127, r.stderr
    assert f'"{new.resolve()}/.venv"' in (new / ".venv" / "bin" / "activate").read_text()


def test_a_python_that_cannot_make_a_venv_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "parley")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3.13"
    # a Python that answers the version check but, like Debian's without
    # python3-venv, fails `-m venv` after making .venv/bin/python
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then\n'
        '  mkdir -p "$3/bin" && ln -s ' + sys.executable + ' "$3/bin/python"\n'
        "  echo 'The virtual environment was not created successfully because ensurepip is not available.' >&2\n"
        "  exit 1\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    r = _start(repo, f"{bin_dir}:{os.environ['PATH']}", tmp_path)
    assert r.returncode == 2, r.stderr
    ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"sudo apt-get install python{ver}-venv" in r.stderr
    assert not (repo / ".venv").exists()
