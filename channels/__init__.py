"""Platform adapters: raw platform event -> InboundEvent, OutboundMessage -> platform call."""
