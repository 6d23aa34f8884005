"""The web chat page when things are not simple: links from other sites, other sites'
forms, several tabs, a server without its storage, hostile markdown."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agent_core.events import OutboundMessage, ThreadKey
from agent_core.llm.demo import DemoProvider
from tests.browser.test_web_chat_browser import approvals_landed
from tests.integration.conftest import free_port
from tests.integration.inbox import ever_published

pytestmark = pytest.mark.browser


def base_of(rt: Any) -> str:
    return f"http://127.0.0.1:{rt.port}"


async def say(page: Any, text: str) -> None:
    await page.locator("#input").fill(text)
    await page.locator("#input").press("Enter")


async def wait_final(page: Any, text: str, timeout: float = 10_000) -> Any:
    loc = page.locator("#messages li.msg.bot:not(.streaming)", has_text=text)
    await loc.last.wait_for(timeout=timeout)
    return loc.last


async def connected(page: Any, timeout: float = 10_000) -> None:
    await page.wait_for_selector("#status:text-is('connected')", timeout=timeout)


# ---------------------------------------------------------------- other sites
async def test_arriving_from_a_link_on_another_site_keeps_the_conversation(
    served: Any, open_chat: Any
) -> None:
    """The cookie is SameSite=Lax: a link to the chat from any other site (Slack, a
    mail, the README) arrives with it, so the conversation (and a login) is kept."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await say(page, "remember pineapple")
        await page.locator("#messages li.msg.bot", has_text="You said").wait_for()
        thread = await page.evaluate("thread")
        link = f'<a id="go" href="{base_of(rt)}/">open my Parley chat</a>'
        await page.route(
            "http://elsewhere.test/**",
            lambda route: route.fulfill(body=link, content_type="text/html"),
        )
        await page.goto("http://elsewhere.test/")
        await page.click("#go")
        await connected(page)
        arrived = await page.evaluate("thread")
        # and for good: typed in the address bar afterwards, it is still the same
        await page.goto(base_of(rt) + "/")
        await connected(page)
        after = await page.evaluate("thread")
        assert (arrived, after) == (thread, thread)
        assert await page.locator("#messages", has_text="pineapple").count() == 1


async def test_another_sites_form_or_script_cannot_post_a_message(
    served: Any, open_chat: Any, redis: Any
) -> None:
    """With a Lax cookie a cross-site form still cannot chat: the browser sends no
    cookie with a cross-site POST, and the API takes JSON only, which a form cannot
    send (nor a script on another site without CORS, which the chat never allows;
    test_json_only_so_other_sites_cannot_post_forms shows the 415 with a cookie)."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        before = await ever_published(redis)
        target = base_of(rt) + "/api/messages"
        evil = f"""<form id="f" method="post" action="{target}" enctype="text/plain">
          <input name='{{"text":"from a form","x":"' value='"}}'></form>
          <script>
            fetch("{target}", {{method: "POST", mode: "no-cors", credentials: "include",
                   headers: {{"Content-Type": "text/plain"}},
                   body: JSON.stringify({{text: "from a script"}})}}).finally(() => {{
              document.title = "sent"; document.getElementById("f").submit(); }});
          </script>"""
        await page.route(
            "http://elsewhere.test/**",
            lambda route: route.fulfill(body=evil, content_type="text/html"),
        )
        answers: list[int] = []  # what the chat answered (the script's request may be blocked)
        page.on("response", lambda r: answers.append(r.status) if r.url == target else None)
        async with page.expect_response(
            lambda r: r.request.resource_type == "document" and r.url == target
        ):
            await page.goto("http://elsewhere.test/")
        assert answers and all(400 <= s < 500 for s in answers), answers
        await asyncio.sleep(0.5)
        assert await ever_published(redis) == before


# ---------------------------------------------------------------- tabs
async def test_a_tab_keeps_its_conversation_after_another_tab_starts_a_new_one(
    served: Any, open_chat: Any
) -> None:
    async with served() as rt:
        tab1 = await open_chat(base_of(rt))
        await say(tab1, "remember mango")
        await wait_final(tab1, "You said: remember mango")
        first = await tab1.evaluate("thread")
        tab2 = await tab1.context.new_page()
        await tab2.goto("/")
        await connected(tab2)
        await tab2.locator("#new").click()
        await wait_final(tab2, "Started a new conversation")
        assert await tab2.evaluate("thread") != first
        # tab 1 still shows and writes to its own conversation
        await say(tab1, "still mango")
        await wait_final(tab1, "You said: still mango")
        assert await tab1.evaluate("thread") == first
        assert await tab1.locator("#messages", has_text="Started a new").count() == 0
        assert await tab2.locator("#messages", has_text="mango").count() == 0
        # its event stream reconnects (a server restart) and stays with it
        await tab1.evaluate("connect()")
        await connected(tab1)
        await say(tab2, "only in the new one")
        await wait_final(tab2, "You said: only in the new one")
        await asyncio.sleep(0.5)
        assert await tab1.locator("#messages", has_text="only in the new one").count() == 0
        assert tab1.problems == []


def _unexpected(problems: list[str]) -> list[str]:
    """Console errors other than the browser's own note of an expected 409."""
    return [p for p in problems if "status of 409" not in p]


async def test_an_approval_in_a_tab_whose_conversation_was_replaced_is_decided_there(
    served: Any, open_chat: Any
) -> None:
    if not approvals_landed():
        pytest.skip("approvals are not in the agent core yet (no agent_core/tools)")
    async with served() as rt:
        tab1 = await open_chat(base_of(rt))
        await say(tab1, "demo an approval")
        approve = tab1.locator("#messages .buttons button", has_text="Approve")
        await approve.wait_for()
        tab2 = await tab1.context.new_page()
        await tab2.goto("/")
        await connected(tab2)
        await tab2.locator("#new").click()
        await wait_final(tab2, "Started a new conversation")
        await approve.click()
        await wait_final(tab1, "the demo action ran")
        assert await tab2.locator("#messages", has_text="demo action").count() == 0


async def test_a_tab_whose_conversation_is_gone_shows_the_current_one_and_says_so(
    served: Any, open_chat: Any
) -> None:
    async with served() as rt:
        page = await open_chat(base_of(rt))
        current = await page.evaluate("thread")
        await page.evaluate("thread = 'web:local:notthisbrowser1:'")
        await say(page, "where does this go?")
        info = page.locator("#messages li.msg.info[role=status]", has_text="replaced")
        await info.wait_for()
        assert "still in the box" in await info.inner_text()
        assert await page.locator("#input").input_value() == "where does this go?"
        assert await page.evaluate("thread") == current
        await connected(page)
        await page.locator("#input").press("Enter")
        await wait_final(page, "You said: where does this go?")
        assert _unexpected(page.problems) == []


# ---------------------------------------------------------------- storage down
async def test_the_page_retries_while_the_server_cannot_read_the_conversation(
    served: Any, browser: Any
) -> None:
    async with served() as rt:
        ch = rt.channels["web"]
        real = ch.redis
        dead = Redis.from_url(f"redis://127.0.0.1:{free_port()}", socket_connect_timeout=0.2)
        ch.redis = dead
        ctx = await browser.new_context(base_url=base_of(rt))
        try:
            page = await ctx.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda e: problems.append(str(e)))
            unavailable: list[int] = []
            page.on("response", lambda r: unavailable.append(1) if r.status == 503 else None)
            await page.goto("/")
            await page.wait_for_selector("#status:has-text('retrying')")
            await asyncio.sleep(1.5)
            ch.redis = real
            await connected(page, timeout=15_000)
            assert len(unavailable) >= 2
            assert await page.locator("#messages li.msg.error").count() == 0
            await say(page, "back again")
            await wait_final(page, "You said: back again")
            assert problems == []
        finally:
            ch.redis = real
            await dead.aclose()
            await ctx.close()


async def test_sending_again_after_a_lost_response_and_a_503_is_the_same_message(
    served: Any, open_chat: Any
) -> None:
    """The first POST reaches the server but its response is lost; the page's retry
    gets a 503 ("Not sent").  Sent again, the text keeps its id: the server sees a
    retry of the question it already has, not a second question answered twice."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await connected(page)
        posts: list[dict[str, Any]] = []

        async def flaky(route: Any) -> None:
            body = orjson.loads(route.request.post_data or "{}")
            posts.append(body)
            if len(posts) == 1:
                await route.fetch()  # taken by the server, answer lost on the way back
                await route.abort()
            elif len(posts) == 2:
                await route.fulfill(status=503, json={"error": "storage blip"})
            else:
                await route.continue_()

        await page.route("**/api/messages", flaky)
        await say(page, "what time is it?")
        await page.locator("#messages li.msg.error", has_text="Not sent").wait_for()
        assert await page.locator("#input").input_value() == "what time is it?"
        async with page.expect_response("**/api/messages") as sent:
            await page.locator("#input").press("Enter")
        assert (await (await sent.value).json())["result"] == "duplicate"
        assert len(posts) == 3 and len({p["id"] for p in posts}) == 1, posts
        user = page.locator("#messages li.msg.user", has_text="what time is it?")
        assert await user.count() == 1


async def test_a_message_sent_while_new_conversation_is_on_its_way_goes_to_the_new_one(
    served: Any, open_chat: Any
) -> None:
    """Messages go one at a time: one written while /new's response is still coming
    waits for the switch and lands in the new conversation, not in the old one the
    page is about to leave (where it would vanish from view)."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await connected(page)
        new_held = asyncio.Event()
        release = asyncio.Event()

        async def slow_new(route: Any) -> None:
            if orjson.loads(route.request.post_data or "{}").get("text") == "/new":
                new_held.set()
                await release.wait()
            await route.continue_()

        await page.route("**/api/messages", slow_new)
        await page.locator("#new").click()
        await new_held.wait()
        await say(page, "hello right after New")
        release.set()
        await wait_final(page, "Started a new conversation")
        await wait_final(page, "demo model")
        new_thread = await page.evaluate("thread")
        history = await page.evaluate(
            "fetch('/api/history?thread=' + encodeURIComponent(thread)).then(r => r.json())"
        )
        texts = [m.get("tx", "") for m in history["messages"]]
        assert "hello right after New" in texts, (new_thread, texts)


async def test_a_request_that_never_answers_does_not_hold_back_the_next_message(
    served: Any, open_chat: Any
) -> None:
    """Messages go one at a time, but a request that never settles (a hung connection:
    a mobile network switch, a stalled proxy) is given up after requestTimeoutMs (cut
    short here): the message shows "Not sent" with its text back in the box, and the
    one written after it goes."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await connected(page)
        await page.evaluate("requestTimeoutMs = 400")
        posted: list[str] = []
        held = asyncio.Event()
        second = asyncio.Event()

        async def hang_first(route: Any) -> None:
            text = orjson.loads(route.request.post_data or "{}").get("text")
            posted.append(text)
            if text == "first":
                held.set()
                return  # never answered: the connection hangs
            if text == "second":
                second.set()
            await route.continue_()

        await page.route("**/api/messages", hang_first)
        await say(page, "first")
        await held.wait()
        await say(page, "second")
        await asyncio.wait_for(second.wait(), 5)
        await wait_final(page, "second")
        assert posted == ["first", "first", "second"], posted  # one retry, same id
        assert await page.locator("#input").input_value() == "first"
        await page.locator("#messages li.msg.error", has_text="Not sent").wait_for(timeout=2000)


async def test_new_whose_history_read_fails_once_still_shows_the_new_conversation(
    served: Any, open_chat: Any
) -> None:
    """/new is taken, but the new conversation's first history read fails (a storage
    or network blip): the page said "Could not start a new conversation" (the server
    had switched), put "/new" back in the box, kept the old conversation and followed
    no feed at all, so later messages and answers never showed.  Now it keeps trying
    to show the new conversation, and the chat goes on there."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        await say(page, "ping one")
        await wait_final(page, "You said: ping one")
        old = await page.evaluate("thread")
        failed: list[str] = []

        async def fail_once(route: Any) -> None:
            if not failed:
                failed.append(route.request.url)
                await route.fulfill(
                    status=503, json={"error": "the server cannot reach its storage"}
                )
            else:
                await route.continue_()

        await page.route("**/api/history**", fail_once)
        await say(page, "/new")
        await wait_final(page, "Started a new conversation")
        await connected(page)
        assert failed and await page.evaluate("thread") != old
        assert await page.locator("#input").input_value() == ""
        assert await page.locator("#messages", has_text="ping one").count() == 0
        assert await page.locator("#messages li.msg.error").count() == 0
        await say(page, "are you there")
        await wait_final(page, "You said: are you there")
        assert [p for p in page.problems if "status of 503" not in p] == []


async def test_new_conversation_pressed_twice_starts_one_and_says_connecting_meanwhile(
    served: Any, open_chat: Any
) -> None:
    """A double click on New conversation started two; and while the new one's history
    loaded (the page's feed closed), the header still said "connected"."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        old = await page.evaluate("thread")
        news: list[str] = []

        def count_new(request: Any) -> None:
            if (
                request.url.endswith("/api/messages")
                and request.method == "POST"
                and orjson.loads(request.post_data or "{}").get("text") == "/new"
            ):
                news.append(request.url)

        page.on("request", count_new)
        release = asyncio.Event()

        async def held(route: Any) -> None:
            await release.wait()
            await route.continue_()

        await page.route("**/api/history*", held)
        await page.locator("#new").dblclick()
        await page.wait_for_function("(old) => thread !== old", arg=old)
        assert await page.locator("#status").inner_text() != "connected"
        release.set()
        await wait_final(page, "Started a new conversation")
        await connected(page)
        await page.locator("#new:enabled").wait_for()
        assert len(news) == 1, news
        assert page.problems == []


# ---------------------------------------------------------------- hostile markdown
async def test_a_deeply_quoted_answer_does_not_break_the_page(served: Any, open_chat: Any) -> None:
    """Quotes nest at most 8 levels (deeper '>' show as text): a line of 6,000 '>'
    neither overflows the renderer live nor keeps the page from starting again."""
    async with served() as rt:
        page = await open_chat(base_of(rt))
        thread = ThreadKey.parse(await page.evaluate("thread"))
        await (
            rt.channels["web"]
            .outbox()
            .send(thread, OutboundMessage("Nested quote:\n" + ">" * 6000 + " deep"))
        )
        answer = page.locator("#messages li.msg.bot", has_text="deep")
        await answer.wait_for()
        assert await answer.locator("blockquote").count() == 8
        await page.reload()
        await connected(page, timeout=5_000)
        assert await page.locator("#messages li.msg.error").count() == 0
        assert await answer.locator("blockquote").count() == 8
        assert page.problems == []


async def test_hostile_markdown_renders_in_linear_time(served: Any, open_chat: Any) -> None:
    async with served() as rt:
        page = await open_chat(base_of(rt))
        took = await page.evaluate(
            """() => ["_a ".repeat(40000), " _".repeat(60000), "[".repeat(120000),
                      "[a".repeat(60000), "_` _` x ".repeat(15000),
                      "*a" + "\\\\*".repeat(60000), "\\\\".repeat(120000),
                      "````\\n" + "```\\n".repeat(60000), "**a *".repeat(30000),
                      "**`".repeat(40000), "***a".repeat(30000), "** `a` *".repeat(20000),
                      "**a `".repeat(30000), "**`" + "a \\\\**".repeat(30000),
                      "- a\\n  - b\\n".repeat(30000), "x\\n# h\\n".repeat(30000),
                      "- a\\n  b\\n".repeat(15000), "- a\\n\\n  b\\n\\n".repeat(15000),
                      "- a\\n" + "  ```\\n".repeat(60000), "\\n".repeat(100000) + "  x",
                      "``" + "a`".repeat(60000), "`` a ".repeat(40000), "\\r\\n".repeat(100000),
                      "| a | b |\\n" + " ".repeat(64000) + "x", "a|b\\n|-" + " ".repeat(64000) + "x",
                      "| a | b |\\n|---|---|\\n" + "| c | `d |\\n".repeat(30000),
                      "|".repeat(120000) + "\\n" + "-|".repeat(60000),
                      "[a](https://x" + "(b)".repeat(40000), "https://x" + "(b)".repeat(40000) + "(",
                      "[a](https://x(".repeat(30000), "https://a(".repeat(30000),
                      "[a](https://" + "(".repeat(100000)].map((src) => {
                 const d = document.createElement('div'); const t0 = performance.now();
                 renderMarkdown(src, d); return performance.now() - t0; })"""
        )
        assert max(took) < 2000, took


async def test_one_message_that_cannot_be_rendered_never_blanks_the_history(
    served: Any, open_chat: Any
) -> None:
    async with served() as rt:
        page = await open_chat(base_of(rt))
        thread = ThreadKey.parse(await page.evaluate("thread"))
        out = rt.channels["web"].outbox()
        for text in ("before", "BOOM **here**", "after"):
            await out.send(thread, OutboundMessage(text))
        await page.locator("#messages li.msg.bot", has_text="after").wait_for()
        await page.evaluate(
            """() => {
                 const real = renderMarkdown;
                 renderMarkdown = (src, into, depth) => {
                   if (String(src).includes("BOOM")) throw new RangeError("too deep");
                   return real(src, into, depth);
                 };
                 return loadHistory();
               }"""
        )
        texts = await page.locator("#messages li.msg.bot").all_inner_texts()
        assert texts == ["before", "BOOM **here**", "after"]  # shown as plain text


async def _approval_prompt(page: Any) -> Any:
    """Ask the demo model for an approval; its Approve button, once shown."""
    await say(page, "demo an approval")
    approve = page.locator("#messages .buttons button", has_text="Approve")
    await approve.wait_for()
    return approve


async def test_a_press_while_new_conversation_loads_goes_to_the_prompts_conversation(
    served: Any, open_chat: Any
) -> None:
    """A button sends the conversation its prompt is in, not the one the page is
    switching to: Approve pressed while New conversation loads decides the approval
    it was shown with (before, it went to the new conversation and the real one
    stayed pending)."""
    if not approvals_landed():
        pytest.skip("approvals are not in the agent core yet (no agent_core/tools)")
    async with served() as rt:
        page = await open_chat(base_of(rt))
        approve = await _approval_prompt(page)
        old = await page.evaluate("thread")

        release = asyncio.Event()  # the new conversation's history waits for the press

        async def held(route: Any) -> None:
            await release.wait()
            await route.continue_()

        await page.route("**/api/history*", held)
        await page.locator("#new").click()
        await page.wait_for_function("(old) => thread !== old", arg=old)
        async with page.expect_request("**/api/actions") as pressed:
            await approve.click()
        body = (await pressed.value).post_data_json
        release.set()  # the history goes on, and any later one passes at once
        assert body["thread"] == old, body
        await wait_final(page, "Started a new conversation")
        # the approval was decided in its own conversation
        for _ in range(100):
            shown = await page.evaluate(
                "(t) => fetch('/api/history?thread=' + encodeURIComponent(t)).then(r => r.json())",
                old,
            )
            if any("the demo action ran" in m["tx"] for m in shown["messages"]):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the approval never ran: {shown}")
        assert await page.locator("#messages", has_text="demo action").count() == 0
        assert _unexpected(page.problems) == []


# ---------------------------------------------------------------- cookie gone
async def test_a_tab_whose_cookie_is_gone_starts_again_and_says_so(
    served: Any, open_chat: Any
) -> None:
    """Cookies cleared (or expired) while the tab stayed open: it still said
    "connected" but every send failed ("no session") and a press said "token
    required", for good.  Now the page starts a new session at once, says the
    earlier conversation is gone for this tab, and keeps the text to send again."""
    if not approvals_landed():
        pytest.skip("approvals are not in the agent core yet (no agent_core/tools)")
    async with served() as rt:
        page = await open_chat(base_of(rt))
        approve = await _approval_prompt(page)
        before = await page.evaluate("thread")
        await page.context.clear_cookies()
        await approve.click()
        notice = page.locator("#messages li.msg.info[role=status]", has_text="session")
        await notice.wait_for()
        assert "choice was not sent" in await notice.inner_text()
        assert await page.evaluate("thread") != before
        await connected(page)

        await page.context.clear_cookies()
        await say(page, "after the cookie went")
        notice = page.locator("#messages li.msg.info[role=status]", has_text="still in the box")
        await notice.wait_for()
        assert await page.locator("#input").input_value() == "after the cookie went"
        await connected(page)
        await page.locator("#input").press("Enter")
        await wait_final(page, "You said: after the cookie went")
        assert await page.locator("#messages li.msg.error").count() == 0
        assert [p for p in page.problems if "status of 400" not in p] == []


# ---------------------------------------------------------------- scrolling
def _gap_below(page: Any) -> Any:
    return page.evaluate(
        "(() => { const m = document.querySelector('main');"
        " return m.scrollHeight - m.scrollTop - m.clientHeight; })()"
    )


async def test_a_streaming_answer_follows_the_bottom_only_while_the_reader_is_there(
    served: Any, open_chat: Any
) -> None:
    """Every edit of a streamed answer (and every typing ping) scrolled to the bottom:
    someone who scrolled up to read was pulled back down a few times a second."""
    async with served(llm=DemoProvider(delay=0.005)) as rt:
        page = await open_chat(base_of(rt), width=360, height=640)
        thread = ThreadKey.parse(await page.evaluate("thread"))
        out = rt.channels["web"].outbox()
        for i in range(15):
            await out.send(thread, OutboundMessage(f"earlier message {i}\n\nwith two lines"))
        await page.locator("#messages li.msg.bot", has_text="earlier message 14").wait_for()
        assert await _gap_below(page) < 80  # at the bottom: new messages are followed
        await say(page, "long")
        streaming = page.locator("#messages li.msg.bot.streaming")
        await streaming.wait_for()
        # while the reader stays at the bottom, the growing answer is followed
        await page.wait_for_function(
            "() => document.querySelector('#messages li.msg.bot.streaming')"
            "?.getBoundingClientRect().height > 800"
        )
        assert await _gap_below(page) < 80
        await page.evaluate("document.querySelector('main').scrollTop = 0")
        tops = []
        for _ in range(8):
            await asyncio.sleep(0.25)
            tops.append(await page.evaluate("document.querySelector('main').scrollTop"))
        assert await streaming.count() == 1, "the answer ended before the check"
        assert max(tops) < 80, f"the view was pulled down while the reader was above: {tops}"
        await streaming.wait_for(state="detached", timeout=30_000)  # the answer is complete
        await page.locator("#typing").wait_for(state="hidden")
        assert await page.evaluate("document.querySelector('main').scrollTop") < 80


async def test_a_long_history_scrolls_once_and_ends_at_the_bottom(
    served: Any, open_chat: Any
) -> None:
    """Loading 1,000 messages scrolled after each one (a forced layout per message):
    ten times slower than drawing them.  Now the view moves once, at the end."""
    text = "\n\n".join(
        f"## Part {i}\n\nSome **bold** text with `code` and a list:\n\n- one\n- two"
        for i in range(3)
    )
    async with served() as rt:
        page = await open_chat(base_of(rt))
        thread = ThreadKey.parse(await page.evaluate("thread"))
        out = rt.channels["web"].outbox()
        await asyncio.gather(*(out.send(thread, OutboundMessage(text)) for _ in range(1000)))
        # 1,000 live arrivals, each drawn: ample time on a loaded machine
        await page.locator("#messages li.msg.bot").nth(999).wait_for(timeout=60_000)
        counts = await page.evaluate(
            """async () => {
                 // count what the page does to the scrolling element, not how long it takes
                 const main = document.querySelector('main');
                 const top = Object.getOwnPropertyDescriptor(Element.prototype, 'scrollTop');
                 const height = Object.getOwnPropertyDescriptor(Element.prototype, 'scrollHeight');
                 const n = {writes: 0, reads: 0};
                 Object.defineProperty(main, 'scrollTop', {configurable: true,
                   get() { n.reads++; return top.get.call(this); },
                   set(v) { n.writes++; top.set.call(this, v); }});
                 Object.defineProperty(main, 'scrollHeight', {configurable: true,
                   get() { n.reads++; return height.get.call(this); }});
                 main.scrollTop = 0; n.writes = 0; n.reads = 0;
                 await loadHistory();
                 delete main.scrollTop; delete main.scrollHeight;
                 return n;
               }"""
        )
        assert await page.locator("#messages li.msg.bot").count() == 1000
        assert counts["writes"] == 1, counts
        assert counts["reads"] <= 2, counts  # no layout forced per message
        assert await _gap_below(page) < 80
