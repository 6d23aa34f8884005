"""redact() masks a URL password holding an unencoded '#' or '?' (a URL parser ends
the authority there; the writer meant a password), in error texts and prompts."""

from __future__ import annotations

import pytest

from agent_core.agent.approvals import _show
from agent_core.llm.errors import redact


@pytest.mark.parametrize(
    "url, secret",
    [
        ("postgres://admin:p#ssw0rd@db:5432/app", "p#ssw0rd"),
        ("https://bob:what?ever@example.com/x", "what?ever"),
    ],
)
def test_url_password_with_hash_or_question_mark_is_masked(url: str, secret: str) -> None:
    assert secret not in redact(url)


def test_approval_prompt_masks_dsn_password_with_hash() -> None:
    shown = _show("postgres://admin:p#ssw0rd@db:5432/app", "dsn", top=True)
    assert "p#ssw0rd" not in shown
