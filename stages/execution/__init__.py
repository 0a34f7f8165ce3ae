"""Running things safely: kernel confinement (`confinement/`), isolated child processes (`isolation`), children that
die with this process (`spawning`), every live child stopped at once (`live_processes`), removing what model code
wrote (`tree_removal`), text and replies that are not trusted (`untrusted`, `service_replies`, `safe_ast`), secrets
kept from children (`redaction`), bounded pools and the order of a streaming run (`slots`, `scheduling`), and the
installed packages' versions, read without importing them (`versions`)."""
