"""What servers and relays share: the Ed25519 key file, atomic file writes, the user-error type."""
