"""Running things safely: confinement, isolated child processes, live processes, tree removal, untrusted text, slots and scheduling."""
