"""The container and systemd files stop Parley gently and restart it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARLEY_SERVICES = ("web", "worker", "gateway")


def _compose() -> dict[str, str]:
    """Each service's block of deploy/docker-compose.yml (the text, without PyYAML)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (ROOT / "deploy" / "docker-compose.yml").read_text().splitlines():
        if not line.startswith(" ") and line.strip():  # a top-level key
            current = None
        elif re.fullmatch(r"  [a-z]+:", line):
            current = blocks.setdefault(line.strip().rstrip(":"), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in blocks.items()}


def test_compose_restarts_every_service_and_waits_for_a_healthy_redis() -> None:
    services = _compose()
    assert set(services) == {"redis", *PARLEY_SERVICES}, services
    for name, block in services.items():
        assert "restart: unless-stopped" in block, name
    assert re.search(r"healthcheck:\n\s+(#.*\n\s+)?test: .*redis-cli ping", services["redis"])
    for name in PARLEY_SERVICES:
        assert "depends_on: { redis: { condition: service_healthy } }" in services[name], name


def test_compose_gives_parley_30_seconds_to_stop() -> None:
    """SHUTDOWN_GRACE_SECS (20) + 5 s to drain: Docker's default 10 s cuts turns off."""
    services = _compose()
    for name in PARLEY_SERVICES:
        assert "stop_grace_period: 30s" in services[name], name
    assert "docker stop -t 30" in (ROOT / "deploy" / "Dockerfile").read_text()


def test_compose_lets_the_env_file_turn_the_web_chat_off() -> None:
    """`environment:` wins over env_file: a fixed "true" there would ignore deploy/.env."""
    web = _compose()["web"]
    assert 'WEB_CHAT_ENABLED: "${WEB_CHAT_ENABLED:-true}"' in web
    assert 'ports: ["127.0.0.1:8000:8000"]' in web  # the web chat stays on loopback


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_build() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".git", ".venv/", ".parley/", "deploy/.env", "**/__pycache__/"):
        assert entry in ignored, entry


def test_systemd_counts_a_sigterm_exit_as_a_clean_stop() -> None:
    unit = (ROOT / "deploy" / "parley.service").read_text().splitlines()
    assert "SuccessExitStatus=143" in unit
    assert "TimeoutStopSec=30" in unit
