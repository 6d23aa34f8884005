"""Tool arguments that are not valid JSON, not an object, or carry unknown keys are
refused with a message the model can act on — never run with the defaults."""

from __future__ import annotations

import pytest

from agent_core.llm.schema import parse_arguments
from agent_core.tools.current_time import CurrentTime
from agent_core.tools.demo import DemoApproval
from agent_core.tools.http_request import HttpRequest
from agent_core.tools.notes import Forget, Recall, Remember
from agent_core.tools.registry import ToolRegistry
from agent_core.tools.shell import RunShell

REG = ToolRegistry(
    [CurrentTime(), Recall(), Remember(), Forget(), HttpRequest(), RunShell(), DemoApproval()]
)


@pytest.mark.parametrize(
    ("tool", "raw"),
    [
        ("current_time", '{"timezone": "Europe/Berlin"'),  # ran as UTC before
        ("recall", '{"query": "wife'),  # listed every note before
        ("http_request", '{"url": "https://x.com", "method": "POST"'),  # "url: Field required"
        ("run_shell", '{"command": "ls'),
    ],
)
def test_truncated_json_is_refused_as_not_json(tool: str, raw: str) -> None:
    with pytest.raises(ValueError, match="arguments were not valid JSON") as err:
        REG.parse_args(tool, parse_arguments(raw))
    assert raw in str(err.value)  # the model sees what it sent
    assert "Field required" not in str(err.value)


def test_long_broken_json_is_quoted_cut_and_says_so() -> None:
    raw = '{"command": "' + "x" * 5000
    with pytest.raises(ValueError, match=r"not valid JSON: .*… \(5013 chars\)"):
        REG.parse_args("run_shell", parse_arguments(raw))


def test_json_that_is_not_an_object_is_refused_plainly() -> None:
    with pytest.raises(ValueError, match=r"must be a JSON object .* not list"):
        REG.parse_args("http_request", parse_arguments('["https://x"]'))


@pytest.mark.parametrize(
    ("tool", "args", "key"),
    [
        ("current_time", {"timezone": "Europe/Berlin", "tz": 1}, "tz"),
        ("current_time", {"tz": "Europe/Berlin"}, "tz"),  # ran as UTC before
        ("recall", {"querry": "wife"}, "querry"),  # listed every note before
        ("http_request", {"url": "https://x.com", "data": "a=1"}, "data"),
        ("forget", {"note_id": "ab12", "confirm": True}, "confirm"),
        ("remember", {"note": "n", "when": "now"}, "when"),
        ("run_shell", {"command": "ls", "cwd": "/"}, "cwd"),
        ("demo_approval", {"note": "n", "x": 1}, "x"),
    ],
)
def test_unknown_keys_are_refused(tool: str, args: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=f"{key}: unknown argument"):
        REG.parse_args(tool, args)


def test_valid_arguments_still_parse() -> None:
    assert REG.parse_args("current_time", {"timezone": "Europe/Berlin"}).model_dump() == {
        "timezone": "Europe/Berlin"
    }
    assert REG.parse_args("current_time", {}).model_dump() == {"timezone": "UTC"}
    assert REG.parse_args("recall", {"query": None}).model_dump() == {"query": ""}  # strict null
