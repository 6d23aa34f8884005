"""Pure pieces of the agent core: parser, tokens, redaction, loop guard, rates, profiles."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.agent import approvals as ap
from agent_core.agent.access import parse_rate
from agent_core.agent.context import estimate, keep_cut
from agent_core.agent.loopguard import Level, LoopGuard
from agent_core.agent.parser import ApprovalReply, Command, Text, parse
from agent_core.agent.profiles import parse_profile
from agent_core.llm.base import ChatMessage
from agent_core.tools.ssrf import address_refused


@given(st.sampled_from(["yes", "Y", "approve", "ok", "OK.", "always", "a", "no", "n", "deny"]))
def test_approval_words_parse_only_while_awaiting(word: str) -> None:
    assert isinstance(parse(word, awaiting_approval=True), ApprovalReply)
    assert parse(word) == Text(word)


@given(st.text(max_size=200))
def test_deny_reason_round_trips(reason: str) -> None:
    got = parse("no because " + reason, awaiting_approval=True)
    if reason.strip():
        assert isinstance(got, ApprovalReply | Text)
    if isinstance(got, ApprovalReply):
        assert got.decision == "deny"


@given(st.from_regex(r"/[a-z][a-z0-9_]{0,20}( [ -~]{0,40})?", fullmatch=True))
def test_commands_win_over_approval_words(text: str) -> None:
    assert isinstance(parse(text, awaiting_approval=True), Command)


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=80))
def test_tokens_parse_or_refuse_never_raise(tok: str) -> None:
    got = ap.parse_token(tok)
    assert got is None or got[1] in ("approve", "always", "deny")


def test_tokens_fit_every_platform() -> None:
    aid = ap.ApprovalStore.new_id()
    for b in ap.buttons(aid):
        assert b.payload.isascii() and len(b.payload.encode()) <= 64
        assert ap.parse_token(b.payload) == (
            aid,
            {"Approve": "approve", "Always": "always", "Deny": "deny"}[b.label],
        )
    assert ap.parse_token("ap:short:a") is None
    assert ap.parse_token(f"ap:{aid}:x") is None


def test_summary_redacts_secrets_and_truncates() -> None:
    text = ap.describe_call(
        "http_request",
        {
            "url": "https://example.com/" + "x" * 500,
            "headers": {"Authorization": "Bearer abcdefghijklmnop", "Accept": "json"},
            "body": "api_key=sk-abcdefghijklmnopqrstuvwxyz",
        },
    )
    assert "abcdefghijklmnop" not in text and "sk-abc" not in text
    assert "•••" in text and "json" in text
    assert "(5" in text  # the long url says how long it was


def test_loop_guard_levels() -> None:
    g = LoopGuard()
    levels = [g.record("t", {"a": 1}, f"r{i}").level for i in range(20)]
    assert levels[8] is Level.OK and levels[9] is Level.WARN
    assert levels[10:19] == [Level.OK] * 9  # one warning per pattern
    assert levels[19] is Level.CRITICAL
    # poll-like: identical results in a row
    g = LoopGuard()
    levels = [g.record("poll", {"i": i % 2}, "same").level for i in range(4)]
    assert Level.CRITICAL not in levels
    # ping-pong between two calls
    g = LoopGuard()
    levels = [g.record("x" if i % 2 else "y", {}, str(i)).level for i in range(20)]
    assert levels[9] is Level.WARN and levels[19] is Level.CRITICAL
    # the canonical key ignores argument order
    g = LoopGuard()
    for i in range(9):
        g.record("t", {"a": 1, "b": 2} if i % 2 else {"b": 2, "a": 1}, str(i))
    assert g.record("t", {"a": 1, "b": 2}, "x").level is Level.WARN
    # survives a round trip through the session
    g2 = LoopGuard.from_dict(g.to_dict())
    assert g2.totals == g.totals and g2.warned == g.warned


def test_hard_stop_at_30_calls_in_a_turn() -> None:
    g = LoopGuard()
    last = Level.OK
    for i in range(30):
        g.window.clear()  # even spread out beyond the window
        last = g.record("t", {}, str(i)).level
    assert last is Level.CRITICAL


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("20/minute", (20, 60.0)),
        ("5/second", (5, 1.0)),
        ("100/hour", (100, 3600.0)),
        ("10/30s", (10, 30.0)),
        ("", None),
    ],
)
def test_parse_rate(text: str, want: tuple[int, float] | None) -> None:
    assert parse_rate(text) == want


def test_bad_rate_is_a_config_error() -> None:
    from agent_core.errors import ConfigError
    from agent_core.settings import CoreSettings, load

    with pytest.raises(ConfigError) as exc:
        load(CoreSettings, user_rate_limit="lots", dm_policy="maybe")
    assert any("USER_RATE_LIMIT" in p for p in exc.value.problems)
    assert any("DM_POLICY" in p for p in exc.value.problems)


def test_profiles_front_matter() -> None:
    p = parse_profile(
        "---\nname: Coder\nmodel: gpt-4o # fast\ntools: [http_request, current_time]\n---\nBe terse.",
        "file",
    )
    assert (p.name, p.model, p.tools, p.system_prompt) == (
        "coder",
        "gpt-4o",
        ("http_request", "current_time"),
        "Be terse.",
    )
    assert parse_profile("Just a prompt.", "plain").tools is None


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "172.16.5.5",
        "169.254.169.254",
        "100.64.0.1",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_private_addresses_are_refused(ip: str) -> None:
    assert address_refused(ipaddress.ip_address(ip))


def test_public_addresses_pass() -> None:
    assert address_refused(ipaddress.ip_address("93.184.216.34")) == ""
    assert address_refused(ipaddress.ip_address("2606:4700::1111")) == ""


def test_token_estimate_and_turn_cuts() -> None:
    msgs = [ChatMessage("user", "one two three"), ChatMessage("assistant", "four")]
    assert estimate(msgs) == int((3 * 1.3 + 4) + (1 * 1.3 + 4))
    h = [
        ChatMessage("user", "a"),
        ChatMessage("assistant", "b"),
        ChatMessage("user", "c"),
        ChatMessage("tool", "t"),
        ChatMessage("user", "d"),
    ]
    assert keep_cut(h, 2) == 2
    assert keep_cut(h, 5) == 0
