"""Shared hypothesis settings and strategies for the fuzz tests.

CI runs a few hundred cases per test; ``PARLEY_LONG=1`` runs thousands (the
whole package: more than 10,000 cases).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

LONG = os.environ.get("PARLEY_LONG", "") not in ("", "0", "false", "no")


def examples(ci: int, long: int) -> Any:
    return settings(
        max_examples=long if LONG else ci,
        deadline=None,
        derandomize=not LONG,  # CI is reproducible; long runs explore
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
        database=None,
    )


TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300
) | st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "**",
        "*a _b ~c `d",
        "```\nunterminated",
        "[x](javascript:alert(1))",
        "@everyone @here <!channel> <!here> <@U1> <#C1> <!subteam^S1>",
        "\u202e\u200b\ufeff",
        "😀" * 50,
        "a" * 5000,
        "|" * 10 + "\n" + "---|" * 10,
        "> quote\n>> nested\n- list\n1. item",
        "/new",
        "/approve",
        "yes",
        "ap:AAAAAAAA:a",
    ]
)

JSON_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(
            st.text(max_size=12) | st.sampled_from(["type", "text", "id"]), inner, max_size=6
        )
    ),
    max_leaves=30,
)
