"""Processes and wiring: settings -> runtime, ASGI app, worker, gateway, CLI."""
