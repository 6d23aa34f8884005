"""The web chat's script loads on the browsers people still use (older iPhones too).

A regex lookbehind (``(?<!…)`` / ``(?<=…)``) is a syntax error in Safari before
16.4: the whole of app.js failed to parse there, so the page never started.
``form.requestSubmit()`` needs Safari 16.  Neither may come back.
"""

from __future__ import annotations

from pathlib import Path

APP_JS = Path(__file__).resolve().parents[2] / "channels" / "web" / "static" / "app.js"


def test_app_js_uses_no_regex_lookbehind_nor_request_submit() -> None:
    src = APP_JS.read_text(encoding="utf-8")
    for needle in ("(?<!", "(?<=", "requestSubmit"):
        lines = [n for n, line in enumerate(src.splitlines(), 1) if needle in line]
        assert not lines, f"app.js uses {needle} (Safari < 16.4 / 16) on lines {lines}"


def test_enter_that_ends_an_ime_composition_does_not_send() -> None:
    """WebKit (Safari) fires compositionend before the Enter keydown, so isComposing is
    already false there; keyCode 229 still marks the key as the IME's.  Checking only
    isComposing sent a half-typed Japanese/Chinese message on Safari."""
    src = APP_JS.read_text(encoding="utf-8")
    assert "if (e.isComposing || e.keyCode === 229) return;" in src
