"""Tools the agent can call: a typed registry, the built-ins and their approval policies.

Adding a tool is one module with a :class:`~agent_core.tools.base.Tool` subclass
plus one line in :func:`default_registry` (or ``registry.add(MyTool())`` in
your own wiring).  See docs/tools.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.tools.base import Approval, Tool, ToolContext, ToolError
from agent_core.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from agent_core.settings import CoreSettings

__all__ = ["Approval", "Tool", "ToolContext", "ToolError", "ToolRegistry", "default_registry"]


def default_registry(settings: CoreSettings) -> ToolRegistry:
    """The built-in tools, as configured (``run_shell`` only when enabled)."""
    from agent_core.tools.current_time import CurrentTime
    from agent_core.tools.demo import DemoApproval
    from agent_core.tools.http_request import HttpRequest
    from agent_core.tools.notes import Forget, Recall, Remember
    from agent_core.tools.shell import RunShell

    reg = ToolRegistry([CurrentTime(), HttpRequest(), Remember(), Recall(), Forget()])
    if settings.enable_shell_tool:
        reg.add(RunShell())
    reg.add(DemoApproval())
    return reg
