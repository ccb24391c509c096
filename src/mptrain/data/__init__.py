"""Data: where samples come from (sources), how they are shared between processes (shared)
and how each epoch is split among workers (sharding)."""
