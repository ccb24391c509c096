"""Data: where samples come from (sources), how they are shared between processes (shared)
and how each epoch is split among workers (sharding); the user's data built under the run's
seed (seeding), and what a checkpoint records of the data to check a resume (fingerprint)."""
