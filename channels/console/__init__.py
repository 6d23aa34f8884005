"""The terminal chat (`parley chat`)."""
