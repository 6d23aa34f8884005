"""EVENT_LOOP: which event loop `parley run` and `parley chat` run on.

The default (`auto`) is uvloop wherever it is installed (a dependency except on
Windows). The parts that lean on the loop's clock and process handling are run on
uvloop here, since the rest of the suite runs on asyncio's loop.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer

from agent_core.loadgate import LoopLag
from bots.cli import _run_async, loop_factory

uvloop = pytest.importorskip("uvloop")


def test_auto_and_uvloop_pick_uvloop_and_asyncio_picks_the_default() -> None:
    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is None


def test_without_uvloop_auto_falls_back_and_uvloop_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert loop_factory("auto") is None
    with pytest.raises(typer.Exit) as exc:
        loop_factory("uvloop")
    assert exc.value.exit_code == 2
    assert "EVENT_LOOP: uvloop is not installed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("choice", "kind"), [("uvloop", "uvloop"), ("auto", "uvloop"), ("asyncio", "asyncio")]
)
def test_commands_run_on_the_loop_asked_for_and_leave_the_signals_as_they_were(
    choice: str, kind: str
) -> None:
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        seen.append("uvloop" if isinstance(loop, uvloop.Loop) else "asyncio")
        loop.add_signal_handler(signal.SIGINT, lambda: None)  # as `parley run` does

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    _run_async(main, event_loop=choice)
    assert seen == [kind]
    # uvloop keeps its handlers bound to the closed loop unless they are put back:
    # SIGTERM and Ctrl-C would then do nothing while the process ends
    assert {sig: signal.getsignal(sig) for sig in before} == before


def _on_uvloop(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
        return runner.run(coro)


def test_the_read_gate_sees_a_blocked_uvloop_loop() -> None:
    async def main() -> tuple[float, float, float]:
        lag = LoopLag(sample_secs=0.01)
        task = asyncio.create_task(lag.run())
        try:
            await asyncio.sleep(0.1)
            idle = lag.lag
            time.sleep(0.2)  # noqa: ASYNC251 -- on purpose: hold the loop 200 ms
            await asyncio.sleep(0.005)
            blocked = lag.lag
            await asyncio.sleep(0.5)
            return idle, blocked, lag.lag
        finally:
            task.cancel()

    idle, blocked, after = _on_uvloop(main())
    assert idle < 0.05
    assert blocked >= 0.1
    assert after < 0.05


def test_the_shell_tools_timeout_kills_its_process_group_on_uvloop(tmp_path: Path) -> None:
    from agent_core.events import ThreadKey
    from agent_core.settings import CoreSettings
    from agent_core.tools.base import ToolContext, ToolError
    from agent_core.tools.shell import RunShell, ShellArgs

    def ctx(**settings: Any) -> ToolContext:
        return ToolContext(
            redis=None,  # type: ignore[arg-type]
            settings=CoreSettings(**settings),
            thread=ThreadKey("web", "local", "loop", ""),
            user="web:u1",
        )

    marker = tmp_path / "still-running"

    async def main() -> None:
        # one child in the group, one that left it (setsid): both must die
        cmd = (
            f"sh -c 'sleep 2; touch {marker}.1' & setsid sh -c 'sleep 2; touch {marker}' & sleep 30"
        )
        with pytest.raises(ToolError, match="killed"):
            await RunShell().run(ShellArgs(command=cmd), ctx(shell_tool_timeout_secs=0.5))
        out = await RunShell().run(ShellArgs(command="echo hi"), ctx(shell_tool_timeout_secs=5))
        assert out == "exit code 0\nhi\n"
        await asyncio.sleep(2.5)

    _on_uvloop(main())
    assert not marker.exists(), "a process that left the group ran on after the timeout"
    assert not Path(f"{marker}.1").exists(), "a process of the killed command ran on"


@pytest.mark.parametrize(
    ("choice", "installed", "ok", "says"),
    [
        ("auto", True, True, "uvloop "),
        ("uvloop", True, True, "uvloop "),
        ("asyncio", True, True, "asyncio (EVENT_LOOP=asyncio)"),
        ("auto", False, True, "asyncio (uvloop is not installed"),
        ("uvloop", False, False, "refuse to start"),
    ],
)
def test_doctor_says_which_loop_and_fails_when_the_one_asked_for_is_missing(
    choice: str, installed: bool, ok: bool, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from bots.ops import event_loop_check

    if not installed:
        monkeypatch.setitem(sys.modules, "uvloop", None)
    check = event_loop_check(SimpleNamespace(core=SimpleNamespace(event_loop=choice)))  # type: ignore[arg-type]
    assert check.ok is ok
    assert says in check.detail
    assert bool(check.fix) is not ok


def test_auto_falls_back_to_asyncio_when_uvloop_cannot_be_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A uvloop that is there but fails to import (a broken or mismatched build) is
    judged by importing it, not by finding it: `auto` falls back to asyncio's loop,
    doctor says why, and `uvloop` is one line, not a traceback."""
    from types import SimpleNamespace

    from bots.ops import event_loop_check

    broken = tmp_path / "uvloop"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('undefined symbol: uv_foo')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "uvloop", raising=False)
    assert loop_factory("auto") is None  # asyncio's loop
    check = event_loop_check(SimpleNamespace(core=SimpleNamespace(event_loop="auto")))  # type: ignore[arg-type]
    assert check.ok
    assert check.detail == (
        "asyncio (uvloop is installed but cannot be imported (undefined symbol: uv_foo); "
        "EVENT_LOOP=auto)"
    )
    with pytest.raises(typer.Exit) as exc:
        loop_factory("uvloop")
    assert exc.value.exit_code == 2
    err = capsys.readouterr().err
    assert "EVENT_LOOP: uvloop is installed but cannot be imported (undefined symbol" in err
    assert "Traceback" not in err
