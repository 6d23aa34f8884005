"""Approval masking: a token count (max_new_tokens, tokens_used, n_tokens) and a
tokenizer's name are no secrets and are shown."""

from __future__ import annotations

import pytest

from agent_core.agent.approvals import secret_key


@pytest.mark.parametrize("key", ["max_new_tokens", "tokenizer", "tokens_used", "n_tokens"])
def test_token_counts_and_tokenizer_are_shown(key: str) -> None:
    assert not secret_key(key)
