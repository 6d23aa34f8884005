"""A marker added to an answer cut short lands after the code block it was cut in."""

from __future__ import annotations

import pytest

from agent_core.agent.fences import open_fence, with_marker


@pytest.mark.parametrize(
    ("text", "closing"),
    [
        ("plain words", ""),
        ("```py\nx = 1\n```\nafter", ""),
        ("```py\nx = 1", "```"),
        ("~~~\ncode", "~~~"),
        ("````md\n```py\ninner\n```\nstill inside", "````"),  # a shorter run does not close
        ("```py\nx\n``` not a close", "```"),  # text after the run: not a closing fence
        ("10. Step:\n    ```bash\n    make", "    ```"),  # in a list item, at its indent
        ("``` `inline` ```", ""),  # a backtick in the info string: inline code, no block
        ("~~~\n```\n~~~", ""),  # the other character neither opens nor closes inside
    ],
)
def test_the_open_fence_is_found(text: str, closing: str) -> None:
    assert open_fence(text) == closing


def test_the_marker_is_its_own_paragraph_after_the_block() -> None:
    assert with_marker("Look:\n```py\nprint(x", "_(cut off)_") == (
        "Look:\n```py\nprint(x\n```\n\n_(cut off)_"
    )
    assert with_marker("Done.", "_(stopped)_") == "Done.\n\n_(stopped)_"
    assert with_marker("", "_(stopped)_") == "_(stopped)_"
