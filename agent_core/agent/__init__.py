"""The agent: sessions, the loop, the submission parser, commands, turns."""
