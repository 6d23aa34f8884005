"""Approval masking: a token count (max_new_tokens, tokens_used, n_tokens) and a
tokenizer's name are no secrets and are shown."""

from __future__ import annotations

import pytest

from agent_core.agent.approvals import describe_call, secret_key


@pytest.mark.parametrize("key", ["max_new_tokens", "tokenizer", "tokens_used", "n_tokens"])
def test_token_counts_and_tokenizer_are_shown(key: str) -> None:
    assert not secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "new_access_token",
        "new_refresh_token",
        "refresh_token_new",
        "new_token",
        "github_token_new",
        "per_user_token",
        "id_token",
        "csrf_token",
    ],
)
def test_a_rotated_or_named_credential_token_stays_secret(key: str) -> None:
    assert secret_key(key), key


def test_a_new_refresh_token_is_masked_in_the_prompt() -> None:
    prompt = describe_call("http_request", {"body": {"new_refresh_token": "rt-9f8e7d6c5b4a"}})
    assert "rt-9f8e7d6c5b4a" not in prompt, prompt
