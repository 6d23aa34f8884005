"""docs/agent.md: "Arguments are shown with secrets redacted (keys like
`authorization`, `token`, `password`, `api_key` ...)"."""

from __future__ import annotations

from agent_core.agent.approvals import describe_call


def test_secret_keys_inside_a_list_are_redacted() -> None:
    shown = describe_call("create_users", {"users": [{"name": "bob", "password": "hunter22"}]})
    assert "hunter22" not in shown, shown


def test_secret_keys_inside_a_json_request_body_are_redacted() -> None:
    """The http_request POST the docs show: its body is a JSON string."""
    shown = describe_call(
        "http_request",
        {
            "method": "POST",
            "url": "https://api.example.com/login",
            "body": '{"username": "bob", "password": "hunter22"}',
        },
    )
    assert "hunter22" not in shown, shown
