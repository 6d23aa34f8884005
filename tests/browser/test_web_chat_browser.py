"""The local web chat in a real Chromium: what a new user sees after `parley run`.

Every test runs the whole service (web + worker, demo model, real Valkey) and
drives the page like a person would: typing, Enter, clicking or tabbing to
buttons, reloading.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from agent_core.events import OutboundMessage, ThreadKey
from agent_core.llm import errors as llm_errors
from agent_core.llm.base import CompletionRequest, StreamItem
from agent_core.llm.demo import DemoProvider
from agent_core.store import keys
from tests.browser.conftest import DOCS

pytestmark = pytest.mark.browser

TOOLS_DIR = Path(__file__).resolve().parents[2] / "agent_core" / "tools"


def approvals_landed() -> bool:
    """The agent core's tools + approval flow (demo_approval) are in this tree."""
    return any(p.suffix == ".py" for p in TOOLS_DIR.glob("*.py"))


def base_of(rt: Any) -> str:
    return f"http://127.0.0.1:{rt.port}"


async def say(page: Any, text: str) -> None:
    box = page.locator("#input")
    await box.fill(text)
    await box.press("Enter")


def bot(page: Any) -> Any:
    return page.locator("#messages li.msg.bot")


async def wait_final(page: Any, text: str, timeout: float = 10_000) -> Any:
    """The bot message containing ``text``, once it stopped streaming."""
    loc = page.locator("#messages li.msg.bot:not(.streaming)", has_text=text)
    await loc.last.wait_for(timeout=timeout)
    return loc.last


async def test_a_message_streams_in_and_the_typing_indicator_comes_and_goes(
    served: Any, open_chat: Any
) -> None:
    async with served(llm=DemoProvider(delay=0.03)) as rt:
        page = await open_chat(base_of(rt))
        assert await page.evaluate("document.activeElement.id") == "input"
        # Watch every rendering of the answer as it grows.
        await page.evaluate(
            """() => {
              window.seen = [];
              new MutationObserver(() => {
                const b = document.querySelector('#messages li.msg.bot .body');
                if (b) window.seen.push([b.textContent.length,
                                         b.parentElement.classList.contains('streaming')]);
              }).observe(document.getElementById('messages'),
                         {subtree: true, childList: true, characterData: true});
            }"""
        )
        await say(page, "tell me about streaming please")
        await page.locator("#typing").wait_for(state="visible")
        await page.locator("#messages li.msg.user", has_text="tell me about streaming").wait_for()
        answer = await wait_final(page, "offline demo model")
        await page.locator("#typing").wait_for(state="hidden")
        text = await answer.inner_text()
        assert "You said: tell me about streaming please" in text
        assert "Demo model" in text  # the first answer says it is canned
        seen = await page.evaluate("window.seen")
        partial = [n for n, streaming in seen if streaming]
        assert partial, "the answer never showed while it was being generated"
        assert len(set(partial)) >= 2, f"the answer did not grow in steps: {seen}"
        assert min(partial) < max(n for n, _ in seen)
        assert await page.locator("#input").input_value() == ""
        assert page.problems == []


async def test_a_refresh_shows_the_history_and_the_chat_goes_on(
    served: Any, open_chat: Any
) -> None:
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await say(page, "first message")
        await wait_final(page, "You said: first message")
        await say(page, "/help")
        await wait_final(page, "/new")
        before = await page.locator("#messages li.msg").all_inner_texts()
        await page.reload()
        await page.wait_for_selector("#status:text-is('connected')")
        after = await page.locator("#messages li.msg").all_inner_texts()
        assert after == before
        assert after[0] == "first message" and after[2] == "/help"
        assert "Commands" in after[3]  # slash commands answer like on every platform
        await say(page, "second message")
        await wait_final(page, "You said: second message")
        assert await page.locator("#messages li.msg.user").all_inner_texts() == [
            "first message",
            "/help",
            "second message",
        ]


async def test_markup_in_messages_renders_as_text_and_never_runs(
    served: Any, open_chat: Any
) -> None:
    evil = (
        '<script>window.pwned = 1</script> <img src=x onerror="window.pwned=2"> '
        "[click](javascript:window.pwned=3) **bold** and https://example.com/x"
    )
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await say(page, evil)
        answer = await wait_final(page, "You said:")
        # The user's own bubble and the echoed answer show the markup as text.
        mine = page.locator("#messages li.msg.user").last
        assert await mine.inner_text() == evil
        assert "<script>window.pwned = 1</script>" in await answer.inner_text()
        assert await page.locator("#messages script, #messages img").count() == 0
        assert await page.evaluate("window.pwned") is None
        # Markdown still works: bold, and links only for http(s), opened safely.
        assert await answer.locator("strong", has_text="bold").count() == 1
        links = answer.locator("a")
        assert await links.count() == 1
        assert await links.first.get_attribute("href") == "https://example.com/x"
        assert "noopener" in (await links.first.get_attribute("rel") or "")
        # The formatting sample: code block, inline code, list.
        await say(page, "show me markdown")
        sample = await wait_final(page, "Here is some")
        assert await sample.locator("pre code").inner_text() == "print('hello from Parley')"
        assert await sample.locator("li").all_inner_texts() == ["one", "two"]
        assert await sample.locator("em", has_text="italic").count() == 1
        # CSP forbids inline script anyway.
        resp = await page.request.get("/")
        assert "script-src 'self'" in resp.headers["content-security-policy"]
        assert page.problems == []


async def test_new_starts_a_fresh_conversation_and_it_stays_after_refresh(
    served: Any, open_chat: Any
) -> None:
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await say(page, "remember the word pineapple")
        await wait_final(page, "pineapple")
        old = await page.context.cookies()
        await say(page, "/new")
        await wait_final(page, "Started a new conversation")
        texts = await page.locator("#messages li.msg").all_inner_texts()
        assert not any("pineapple" in t for t in texts), texts
        assert texts[0] == "/new"
        new = await page.context.cookies()
        assert old[0]["value"] != new[0]["value"]
        await say(page, "something else")
        await wait_final(page, "You said: something else")
        # the header button does the same, keyboard only
        await page.locator("#new").focus()
        await page.keyboard.press("Enter")
        await page.wait_for_function(
            "() => document.querySelectorAll('#messages li.msg.user').length === 1"
            " && document.querySelector('#messages li.msg.user').textContent === '/new'"
            " && document.querySelectorAll('#messages li.msg.bot').length === 1"
        )
        await page.reload()
        await page.wait_for_selector("#status:text-is('connected')")
        texts = await page.locator("#messages li.msg").all_inner_texts()
        assert texts[0] == "/new" and "Started a new conversation" in texts[1]
        assert len(texts) == 2


async def test_the_typing_line_goes_away_after_new_even_when_history_is_slow(
    served: Any, open_chat: Any, redis: Any
) -> None:
    """The agent can finish /new before the page has read the new conversation's
    history: its "done" is then behind the entry the page follows from, never
    arrives, and "Parley is typing…" stayed for its 12 s timeout."""
    async with served() as rt:
        page = await open_chat(base_of(rt))

        async def after_the_turn(route: Any) -> None:
            # the history is read only once the /new turn has ended (its "done" is in
            # the stream): the order that left the line on, made certain
            asked = parse_qs(urlparse(route.request.url).query).get("thread", [""])[0]
            stream = keys.outbox_stream(ThreadKey.parse(asked)) if asked else ""
            for _ in range(400):
                if not stream or any(f.get(b"t") == b"done" for _, f in await redis.xrange(stream)):
                    break
                await asyncio.sleep(0.025)
            await route.continue_()

        await page.route("**/api/history*", after_the_turn)
        await page.locator("#new").click()
        await wait_final(page, "Started a new conversation")
        await asyncio.sleep(1.0)
        assert await page.locator("#typing").is_hidden()
        # and the next message's line goes away with its answer as before
        await page.unroute("**/api/history*")
        await say(page, "and now something else")
        await wait_final(page, "You said: and now something else")
        await page.locator("#typing").wait_for(state="hidden")


async def test_errors_are_shown_in_the_conversation(served: Any, open_chat: Any) -> None:
    class FailingDemo(DemoProvider):
        async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
            if "fail" in request.messages[-1].content:
                raise llm_errors.RateLimited("slow down", retry_after=1)
            async for item in super().stream(request):
                yield item

    async with served(llm=FailingDemo()) as rt:
        page = await open_chat(base_of(rt))
        await say(page, "please fail")
        notice = page.locator("#messages li.msg.notice", has_text="rate limited")
        await notice.wait_for()
        await page.locator("#typing").wait_for(state="hidden")
        # a message the server refuses: inline alert, text kept in the box
        await page.locator("#input").fill("x" * 16_001)
        await page.locator("#input").press("Enter")
        alert = page.locator("#messages li.msg.error[role=alert]")
        await alert.wait_for()
        assert "longer than" in await alert.inner_text()
        assert len(await page.locator("#input").input_value()) == 16_001


async def test_keyboard_only_on_a_phone_sized_screen(served: Any, open_chat: Any) -> None:
    async with served() as rt:
        page = await open_chat(base_of(rt), width=360, height=640)
        # focus starts in the input; type, Shift+Enter is a new line, Enter sends
        await page.keyboard.type("line one")
        await page.keyboard.press("Shift+Enter")
        await page.keyboard.type("line two")
        await page.keyboard.press("Enter")
        await page.locator("#messages li.msg.user", has_text="line two").wait_for()
        assert await page.locator("#messages li.msg.user").inner_text() == "line one\nline two"
        await say(page, "long")
        long = await wait_final(page, "This is a long demo answer")
        assert await long.locator("li").count() == 40
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 360, f"the page scrolls sideways at phone width ({width}px)"
        for sel in ("#input", "#send", "#new"):
            box = await page.locator(sel).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 360, sel
        # every button has an accessible name
        names = await page.evaluate(
            "[...document.querySelectorAll('button')].map(b => b.textContent.trim()"
            " || b.getAttribute('aria-label'))"
        )
        assert all(names), names


async def test_the_token_is_asked_once(served: Any, browser: Any) -> None:
    from pydantic import SecretStr

    async with served() as rt:
        rt.channels["web"].settings.web_chat_token = SecretStr("open sesame")
        ctx = await browser.new_context(base_url=base_of(rt))
        try:
            page = await ctx.new_page()
            await page.goto("/")
            await page.locator("#token").wait_for()
            assert await page.locator("#composer").is_hidden()
            assert await page.evaluate("document.activeElement.id") == "token"
            await page.keyboard.type("wrong")
            await page.keyboard.press("Enter")
            await page.locator("#login-error", has_text="wrong token").wait_for()
            await page.locator("#token").fill("open sesame")
            await page.keyboard.press("Enter")
            await page.wait_for_selector("#status:text-is('connected')")
            await say(page, "hello")
            await wait_final(page, "Hello! I'm the demo model")
            await page.reload()
            await page.wait_for_selector("#status:text-is('connected')")
            assert await page.locator("#login").is_hidden()
        finally:
            await ctx.close()


# ---------------------------------------------------------------- approvals
async def _approval_prompt(page: Any) -> Any:
    await say(page, "demo an approval")
    prompt = page.locator("#messages li.msg.bot", has=page.locator(".buttons button"))
    try:
        await prompt.last.wait_for(timeout=10_000)
    except Exception:
        if not approvals_landed():
            pytest.skip("approvals are not in the agent core yet (no agent_core/tools)")
        raise
    # A locator that still finds the message once its buttons are gone.
    body_id = await prompt.last.locator(".body").get_attribute("id")
    return page.locator(f"#messages li:has(> #{body_id})")


async def test_approve_runs_the_tool_and_the_prompt_keeps_only_the_decision(
    served: Any, open_chat: Any
) -> None:
    if not approvals_landed():
        pytest.skip("approvals are not in the agent core yet (no agent_core/tools)")
    async with served() as rt:
        page = await open_chat(base_of(rt))
        prompt = await _approval_prompt(page)
        labels = await prompt.locator(".buttons button").all_inner_texts()
        assert labels == ["Approve", "Always", "Deny"], labels
        # keyboard only: from the input, Shift+Tab walks back through Deny, Always, Approve
        await page.locator("#input").focus()
        for expected in ("Deny", "Always", "Approve"):
            await page.keyboard.press("Shift+Tab")
            assert await page.evaluate("document.activeElement.textContent") == expected
        await page.keyboard.press("Enter")
        await wait_final(page, "the demo action ran")
        await prompt.locator(".buttons").wait_for(state="detached")
        assert "approved" in (await prompt.inner_text()).lower()
        assert await page.locator("#messages .buttons button").count() == 0
        await page.reload()
        await page.wait_for_selector("#status:text-is('connected')")
        await wait_final(page, "the demo action ran")
        assert await page.locator("#messages .buttons button").count() == 0
        assert page.problems == []


async def test_deny_in_another_conversation_refuses_only_there(served: Any, open_chat: Any) -> None:
    if not approvals_landed():
        pytest.skip("approvals are not in the agent core yet (no agent_core/tools)")
    async with served() as rt:
        first = await open_chat(base_of(rt))
        second = await open_chat(base_of(rt))
        p1 = await _approval_prompt(first)
        p2 = await _approval_prompt(second)
        await p2.locator("button", has_text="Deny").click()
        await wait_final(second, "you denied it")
        await p2.locator(".buttons").wait_for(state="detached")
        assert "denied" in (await p2.inner_text()).lower()
        # the first conversation still waits for its own decision
        await asyncio.sleep(0.3)
        assert await p1.locator(".buttons button").count() == 3
        assert await first.locator("#messages", has_text="you denied it").count() == 0


async def test_screenshot_for_the_readme(served: Any, open_chat: Any) -> None:
    """docs/web-chat.png: a short conversation, with an approval prompt when available."""
    async with served() as rt:
        page = await open_chat(base_of(rt), width=900, height=860)
        await say(page, "hello")
        await wait_final(page, "Hello! I'm the demo model")
        await say(page, "show me some markdown")
        await wait_final(page, "Here is some")
        if approvals_landed():
            await _approval_prompt(page)
        await page.locator("#input").fill("what time is it?")
        await asyncio.sleep(0.2)
        DOCS.mkdir(exist_ok=True)
        await page.screenshot(path=str(DOCS / "web-chat.png"))
        assert (DOCS / "web-chat.png").stat().st_size > 10_000


MARKDOWN_CASES = [
    (
        "**bold** and *it* and _it2_",
        "<p><strong>bold</strong> and <em>it</em> and <em>it2</em></p>",
    ),
    (
        "_(see `LLM_BACKEND` here)_",
        "<p><em>(see <code>LLM_BACKEND</code> here)</em></p>",
    ),
    ("snake_case_name and 2 * 3 * 4", "<p>snake_case_name and 2 * 3 * 4</p>"),
    ("<b>x</b> &amp;", "<p>&lt;b&gt;x&lt;/b&gt; &amp;amp;</p>"),
    ("[a](javascript:alert(1))", "<p>[a](javascript:alert(1))</p>"),
    (
        '[a](https://e.com/"onmouseover=x)',
        "<p>a</p>",  # not a plain http(s) URL: the label only
    ),
    (
        "see https://e.com/a.",
        '<p>see <a href="https://e.com/a" rel="noopener noreferrer nofollow" '
        'target="_blank">https://e.com/a</a>.</p>',
    ),
    (
        "```\n<script>x</script>\n```",
        '<pre tabindex="0"><code>&lt;script&gt;x&lt;/script&gt;</code></pre>',
    ),
    # a heading is a block of its own: the next line is a paragraph, not part of it
    ("# Title\ntext", "<h3>Title</h3><p>text</p>"),
    ("## Summary\nThe result is fine.", "<h4>Summary</h4><p>The result is fine.</p>"),
    ("Intro\n## Heading\nmore", "<p>Intro</p><h4>Heading</h4><p>more</p>"),  # mid-paragraph
    ("#hashtag\n\\# no", "<p>#hashtag<br># no</p>"),
    ("- a\n- b", "<ul><li>a</li><li>b</li></ul>"),
    ("3. c\n4. d", '<ol start="3"><li>c</li><li>d</li></ol>'),
    # lists nest by indentation, inside the item above
    (
        "1. First\n   - a\n   - b\n2. Second",
        '<ol start="1"><li>First<ul><li>a</li><li>b</li></ul></li><li>Second</li></ol>',
    ),
    (
        "- a\n  - b\n    - c\n- d",
        "<ul><li>a<ul><li>b<ul><li>c</li></ul></li></ul></li><li>d</li></ul>",
    ),
    ("- a\n    - b\n  - c", "<ul><li>a<ul><li>b</li><li>c</li></ul></li></ul>"),
    ("- a\n1. b", '<ul><li>a</li></ul><ol start="1"><li>b</li></ol>'),  # another kind
    # bold holds *italic* and `code` (a '*' in code does not end it); ***both***
    ("**a *b* c**", "<p><strong>a <em>b</em> c</strong></p>"),
    (
        "**Warning: don't use `rm -rf *`**",
        "<p><strong>Warning: don't use <code>rm -rf *</code></strong></p>",
    ),
    ("Use **`code`** here", "<p>Use <strong><code>code</code></strong> here</p>"),
    ("***x***", "<p><em><strong>x</strong></em></p>"),
    ("***a* b**", "<p><strong><em>a</em> b</strong></p>"),
    ("**a** and **b**", "<p><strong>a</strong> and <strong>b</strong></p>"),
    ("2 ** 3 ** 4", "<p>2 ** 3 ** 4</p>"),
    ("> quoted", "<blockquote><p>quoted</p></blockquote>"),
    ("> a\n>> b", "<blockquote><p>a</p><blockquote><p>b</p></blockquote></blockquote>"),
    (  # quotes nest 8 deep at most; deeper '>' are text
        ">" * 10 + " deep",
        "<blockquote>" * 8 + "<p>&gt;&gt; deep</p>" + "</blockquote>" * 8,
    ),
    # backslash escapes: literal punctuation, a literal backslash elsewhere and in `code`
    (r"\\ and a\b and `a\*b`", r"<p>\ and a\b and <code>a\*b</code></p>"),
    (r"*a\* and **b\**", "<p>*a* and **b**</p>"),  # an escaped delimiter closes nothing
    (
        "\\# no heading\n\\- no list\n\\> no quote",
        "<p># no heading<br>- no list<br>&gt; no quote</p>",
    ),
    # fences close on the same character, at least as long, with nothing else on the line
    ("~~~\n```\nx\n~~~", '<pre tabindex="0"><code>```\nx</code></pre>'),
    ("```\na\n``` not a close\n  ```  ", '<pre tabindex="0"><code>a\n``` not a close</code></pre>'),
    # thematic breaks (before list items: "- - -" is a rule), GFM tables
    ("a\n\n---\nb", "<p>a</p><hr><p>b</p>"),
    ("- a\n* * *\n- b", "<ul><li>a</li></ul><hr><ul><li>b</li></ul>"),
    (
        "Intro\n| Name | Size |\n|:---|---:|\n| `a|b` | **2** |\n| c \\| d |\nafter",
        '<p>Intro</p><div class="table" tabindex="0"><table><thead><tr>'
        '<th style="text-align: left;">Name</th><th style="text-align: right;">Size</th>'
        '</tr></thead><tbody><tr><td style="text-align: left;"><code>a|b</code></td>'
        '<td style="text-align: right;"><strong>2</strong></td></tr>'
        '<tr><td style="text-align: left;">c | d</td><td style="text-align: right;"></td>'
        "</tr></tbody></table></div><p>after</p>",
    ),
    (
        "a | b\n--- | ---",
        '<div class="table" tabindex="0"><table><thead><tr><th>a</th>'
        "<th>b</th></tr></thead></table></div>",
    ),
    ("a | b\n|---|", "<p>a | b<br>|---|</p>"),  # the delimiter row must match the header
    ("x || y", "<p>x || y</p>"),
    ("text |\n---", "<p>text |</p><hr>"),  # a delimiter row has a '|'
    (
        "| a |\n|---|",
        '<div class="table" tabindex="0"><table><thead><tr><th>a</th></tr></thead></table></div>',
    ),
    (  # a block after the rows ends the table, even with a '|' in it
        "a | b\n--- | ---\n- c | d",
        '<div class="table" tabindex="0"><table><thead><tr><th>a</th><th>b</th></tr>'
        "</thead></table></div><ul><li>c | d</li></ul>",
    ),
    (  # one level of balanced parentheses belongs to the URL, in both kinds of link
        "see https://en.wikipedia.org/wiki/Foo_(bar) and [a](https://x.com/a_(b)).",
        '<p>see <a href="https://en.wikipedia.org/wiki/Foo_(bar)" rel="noopener noreferrer '
        'nofollow" target="_blank">https://en.wikipedia.org/wiki/Foo_(bar)</a> and '
        '<a href="https://x.com/a_(b)" rel="noopener noreferrer nofollow" '
        'target="_blank">a</a>.</p>',
    ),
    (  # a parenthesis around a link is not part of it
        "(see https://e.com/a) and (https://e.com/b_(c))",
        '<p>(see <a href="https://e.com/a" rel="noopener noreferrer nofollow" '
        'target="_blank">https://e.com/a</a>) and (<a href="https://e.com/b_(c)" '
        'rel="noopener noreferrer nofollow" target="_blank">https://e.com/b_(c)</a>)</p>',
    ),
    (
        "[[[a](https://e.com/)",
        '<p>[[<a href="https://e.com/" rel="noopener noreferrer nofollow" '
        'target="_blank">a</a></p>',
    ),
    # a link's label is markdown too; a URL in it is text (links never nest)
    (
        "Open [`config.py`](https://e.com/c.py) and [**the guide**](https://e.com/g)",
        '<p>Open <a href="https://e.com/c.py" rel="noopener noreferrer nofollow" '
        'target="_blank"><code>config.py</code></a> and <a href="https://e.com/g" '
        'rel="noopener noreferrer nofollow" target="_blank"><strong>the guide</strong></a></p>',
    ),
    (
        "[see *https://e.com/a*](https://e.com/b)",
        '<p><a href="https://e.com/b" rel="noopener noreferrer nofollow" target="_blank">'
        "see <em>https://e.com/a</em></a></p>",
    ),
    ('[`a`](https://e.com/"x)', "<p><code>a</code></p>"),  # no link: the label, formatted
    # a '*' / '**' after punctuation closes only before a space, punctuation or the end
    ("f(*args, **kwargs) then g(**opts)", "<p>f(*args, **kwargs) then g(**opts)</p>"),
    ("f(*a) and g(*b)", "<p>f(*a) and g(*b)</p>"),
    (
        "**Note:** a, **(b)**, *(c)*.",
        "<p><strong>Note:</strong> a, <strong>(b)</strong>, <em>(c)</em>.</p>",
    ),
    ("**Note:**this", "<p>**Note:**this</p>"),  # punctuation, then a letter: no close
    # ... and Unicode punctuation counts as punctuation (CJK, dashes, ellipsis, quotes)
    ("**Warning!**，请注意", "<p><strong>Warning!</strong>，请注意</p>"),
    ("**答案是42.**。下一步", "<p><strong>答案是42.</strong>。下一步</p>"),
    ("**Note:**—do this", "<p><strong>Note:</strong>—do this</p>"),
    ("**Done.**… and *x.*’s", "<p><strong>Done.</strong>… and <em>x.</em>’s</p>"),
    ("**e.g.**’s", "<p><strong>e.g.</strong>’s</p>"),
    # ~~strike~~ (GFM)
    (
        "~~old **a**~~ and ~~ no ~~ and \\~~x~~",
        "<p><del>old <strong>a</strong></del> and ~~ no ~~ and ~~x~~</p>",
    ),
]


async def test_markdown_renderer_cases(served: Any, open_chat: Any) -> None:
    async with served() as rt:
        page = await open_chat(base_of(rt))
        got = await page.evaluate(
            """(cases) => cases.map((src) => {
                 const d = document.createElement('div'); renderMarkdown(src, d); return d.innerHTML;
               })""",
            [src for src, _ in MARKDOWN_CASES],
        )
        wrong = [
            f"{src!r}\n   got  {html}\n   want {want}"
            for (src, want), html in zip(MARKDOWN_CASES, got, strict=True)
            if html != want
        ]
        assert not wrong, "\n".join(wrong)


async def test_long_fences_and_backslash_escapes_render_as_commonmark(
    served: Any, open_chat: Any
) -> None:
    """A ```` fence holds a ``` block whole; a backslash makes punctuation literal."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        got = await page.evaluate(
            """(cases) => cases.map((src) => {
                 const d = document.createElement('div'); renderMarkdown(src, d);
                 return {pre: [...d.querySelectorAll('pre')].map((p) => p.textContent),
                         text: d.textContent, em: d.querySelectorAll('em').length,
                         html: d.innerHTML};
               })""",
            ["````markdown\n```python\nx=1\n```\n````", "5 \\* 3 = 15 and \\_x\\_"],
        )
        fenced, escaped = got
        assert fenced["pre"] == ["```python\nx=1\n```"], fenced["html"]
        assert fenced["text"] == "```python\nx=1\n```", fenced["html"]
        assert escaped["text"] == "5 * 3 = 15 and _x_", escaped["html"]
        assert escaped["em"] == 0, escaped["html"]


async def render_all(page: Any, sources: list[str]) -> list[str]:
    """Each markdown source rendered by the page's renderer, as HTML."""
    return list(
        await page.evaluate(
            """(sources) => sources.map((src) => {
                 const d = document.createElement('div'); renderMarkdown(src, d); return d.innerHTML;
               })""",
            sources,
        )
    )


async def test_a_code_block_in_a_numbered_step_stays_in_the_step_without_its_indentation(
    served: Any, open_chat: Any
) -> None:
    """A fence indented under "1." kept the list's indentation in its code (copied
    Python or YAML broke) and split the list in two around it."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        in_step, indented, item_like = await render_all(
            page,
            [
                "1. Install:\n   ```python\n   def f():\n       return 1\n   ```\n2. Run it",
                "  ```yaml\n  a:\n    b: 1\n  ```",
                "- x\n  ```\n  - not an item\n  ```\n- y",
            ],
        )
        assert in_step == (
            '<ol start="1"><li>Install:<pre tabindex="0"><code>def f():\n    return 1'
            "</code></pre></li><li>Run it</li></ol>"
        ), in_step
        assert indented == '<pre tabindex="0"><code>a:\n  b: 1</code></pre>', indented
        assert item_like == (
            '<ul><li>x<pre tabindex="0"><code>- not an item</code></pre></li><li>y</li></ul>'
        ), item_like


async def test_continuation_lines_and_blank_lines_keep_a_list_one_list(
    served: Any, open_chat: Any
) -> None:
    """A line indented under an item, or a blank line between items (a "loose" list,
    as the demo's long answer is), ended the list: one <ol> per item."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        got = await render_all(
            page,
            [
                "- item one\n  continued line\n- item two",
                "1. first\n\n2. second\n\n3. third",
                "1. Step\n   - a\n   - b\n\n   More about the step.\n   > a note\n2. Next",
                "- a\n\nnot in the list",
            ],
        )
        assert got == [
            "<ul><li>item one<br>continued line</li><li>item two</li></ul>",
            '<ol start="1"><li>first</li><li>second</li><li>third</li></ol>',
            '<ol start="1"><li>Step<ul><li>a</li><li>b</li></ul><p>More about the step.</p>'
            "<blockquote><p>a note</p></blockquote></li><li>Next</li></ol>",
            "<ul><li>a</li></ul><p>not in the list</p>",
        ], got
        # the demo's long answer: 40 numbered paragraphs with blank lines between
        await say(page, "long")
        answer = await wait_final(page, "This is a long demo answer")
        assert await answer.locator("ol").count() == 1
        assert await answer.locator("ol > li").count() == 40


async def test_right_to_left_text_reads_right_to_left(served: Any, open_chat: Any) -> None:
    """Hebrew or Arabic in a message or in the input was laid out left to right (a
    question's '?' on the wrong side); code inside such an answer stays left to right."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await page.locator("#input").fill("שלום, מה שלומך?")
        assert await page.locator("#input").evaluate("(el) => el.matches(':dir(rtl)')")
        await page.locator("#input").press("Enter")
        user = page.locator("#messages li.msg.user .body")
        await user.wait_for()
        assert await user.evaluate("(el) => el.matches(':dir(rtl)')")
        thread = ThreadKey.parse(await page.evaluate("thread"))
        out = rt.channels["web"].outbox()
        await out.send(thread, OutboundMessage("مرحبا بك\n\n```\nprint(1)\n```\n\nand English"))
        answer = page.locator("#messages li.msg.bot .body", has_text="مرحبا")
        await answer.wait_for()
        assert await answer.evaluate("(el) => el.matches(':dir(rtl)')")
        assert (
            await answer.locator("pre").evaluate("(el) => getComputedStyle(el).direction") == "ltr"
        )
        # an English paragraph in it takes its own direction
        last = answer.locator("p").last
        assert await last.evaluate("(el) => getComputedStyle(el).unicodeBidi") == "plaintext"
        assert await page.locator("#token").get_attribute("dir") == "auto"


async def test_double_backtick_code_spans_and_crlf_line_ends_render_as_commonmark(
    served: Any, open_chat: Any
) -> None:
    """``code`` may hold a '`' (it was garbled into two spans and stray backticks),
    and "\\r\\n" line ends (some models send them) left a heading or list as text."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        got = await render_all(
            page,
            [
                "Use `` `x` `` here",
                "``a`b`` and ` x ` and `  `",
                "## Title\r\ntext\r\n- a\r\n- b\r\n",
            ],
        )
        assert got == [
            "<p>Use <code>`x`</code> here</p>",
            "<p><code>a`b</code> and <code>x</code> and <code>  </code></p>",
            "<h4>Title</h4><p>text</p><ul><li>a</li><li>b</li></ul>",
        ], got
