"""redact() reads a URL's userinfo as URL parsers do: the authority ends at the first
/ ? # or space, the userinfo at its last @.  Masking past a ? or # would show the
approver a host the request does not go to."""

from __future__ import annotations

import pytest

from agent_core.agent.approvals import describe_call
from agent_core.llm.errors import redact


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8080?next=@good.example/",
        "http://metadata:80?x=@good.example",
        "http://2130706433:80?a@good.example",
        "http://[::1]:80?x@good.com",
    ],
)
def test_a_query_holding_an_at_sign_is_never_read_as_a_password(url: str) -> None:
    assert redact(url) == url
    assert url in describe_call("http_request", {"method": "GET", "url": url})


def test_a_percent_encoded_password_is_masked() -> None:
    assert redact("postgres://admin:p%23ssw0rd@db:5432/app") == "postgres://admin:***@db:5432/app"


def test_adversarial_input_is_handled_in_one_pass() -> None:
    text = "://a:" + "?" * 50_000  # no @: nothing to mask, and no backtracking storm
    assert redact(text) == text
