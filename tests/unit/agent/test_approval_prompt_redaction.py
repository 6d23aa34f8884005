"""docs/agent.md: "Arguments are shown with secrets redacted (keys like
`authorization`, `token`, `password`, `api_key` ...)"."""

from __future__ import annotations

import pytest

from agent_core.agent.approvals import describe_call
from agent_core.llm.errors import redact


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


def _post(body: str) -> str:
    return describe_call(
        "http_request", {"method": "POST", "url": "https://api.example/pay", "body": body}
    )


def test_an_object_under_a_secret_looking_key_is_shown_with_its_own_secrets_masked() -> None:
    """Only a secret's string or number is masked: an object under "session" is what
    runs, so it is shown (docs/security.md: a prompt cannot misstate what runs)."""
    body = '{"amount": 10, "session": {"to": "attacker-account", "token": "t0ps3cr3t"}}'
    shown = _post(body)
    assert '"session": {"to": "attacker-account", "token": •••}' in shown, shown
    assert "t0ps3cr3t" not in shown


def test_secret_keys_are_whole_words_not_substrings() -> None:
    harmless = {"author": "mallory@evil.example", "max_tokens": 5, "session_name": "weekly"}
    shown = describe_call("demo_approval", {"meta": harmless})
    for value in ("mallory@evil.example", "5", "weekly"):
        assert value in shown, shown
    secrets = {
        "Authorization": "Basic dXNlcjpwYXNz",
        "X-Api-Key": "k-1",
        "access_token": "at-1",
        "apiKey": "k-2",
        "session_id": "s-1",
        "sessionId": "s-2",
        "Cookie": "c=1",
        "client_secret": "cs-1",
        "password": 12345678,
    }
    shown = describe_call("demo_approval", {"headers": secrets})
    for value in ("dXNlcjpwYXNz", "k-1", "at-1", "k-2", "s-1", "s-2", "c=1", "cs-1", "12345678"):
        assert value not in shown, shown


def test_strings_in_an_object_are_quoted_so_one_cannot_pass_for_two_members() -> None:
    shown = _post('{"to": "me, amount: 5", "amount": 100000}')
    assert '{"to": "me, amount: 5", "amount": 100000}' in shown, shown


def test_a_key_given_twice_shows_both_values() -> None:
    shown = _post('{"amount": 10, "amount": 99999, "to": "me"}')
    assert '"amount": 10, "amount": 99999' in shown, shown


def test_the_body_length_shown_is_the_bodys_not_the_rendered_texts() -> None:
    body = '{\n  "amount":10,\n  "to":"me"\n}'
    assert f"body ({len(body)} characters, 4 lines):" in _post(body)


def test_a_urls_password_is_masked_in_the_prompt() -> None:
    """docs/security.md: prompts mask secret-looking arguments; a URL's userinfo
    password was shown in clear (in a group, to everyone there)."""
    text = describe_call(
        "http_request",
        {
            "method": "POST",
            "url": "https://bob:hunter2hunter2@api.example.com/x?api_key=abcdef123456",
        },
    )
    assert "hunter2hunter2" not in text and "abcdef123456" not in text
    assert "https://bob:***@api.example.com/x" in text  # who and where stay visible


# secrets the whole-word matching of 8f7cf80 showed (found by its diff review)
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("apitoken", "abcd-1111"),  # one lowercase word: old substring match masked it
        ("PGPASSWORD", "pw-2222"),  # a real env var name (libpq)
        ("githubtoken", "ghp-3333"),
        ("api_keys", "k-4444"),
        ("passwords", "pw-5555"),
    ],
)
def test_compound_or_plural_secret_keys_are_still_masked(key: str, value: str) -> None:
    shown = describe_call("demo_approval", {"env": {key: value}})
    assert value not in shown, shown


def test_a_list_under_tokens_is_masked() -> None:
    shown = describe_call("demo_approval", {"body": {"tokens": ["t-6666", "t-7777"]}})
    assert "t-6666" not in shown, shown


def test_a_password_string_that_looks_like_json_is_masked() -> None:
    # the value of a secret key is a string; it is parsed as JSON and its members shown
    shown = describe_call("demo_approval", {"password": '{"v": "p-8888"}'})
    assert "p-8888" not in shown, shown


def test_an_object_under_a_secret_key_shows_its_shape_not_its_values() -> None:
    shown = describe_call("demo_approval", {"cfg": {"secret": {"value": "s-9999"}}})
    assert "s-9999" not in shown, shown
    assert '"secret": {"value": •••}' in shown, shown  # the shape stays visible


def test_a_url_password_holding_an_at_sign_is_masked_whole() -> None:
    """The userinfo ends at the authority's last @ (as urllib and curl read it)."""
    out = redact("curl https://bob:hunter@2secret@host/x")
    assert out == "curl https://bob:***@host/x"


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com:8443?notify=alice@example.com now",
        "https://host/path/user:x@y",
        "git@github.com:org/repo.git and ssh user@host",
        "https://alice@example.com/no-password",
    ],
)
def test_text_without_a_url_password_is_left_as_it_is(text: str) -> None:
    assert redact(text) == text
