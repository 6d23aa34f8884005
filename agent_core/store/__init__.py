"""Everything Parley keeps in Redis: keys, scripts, the client, the embedded server."""
