"""The plain training and evaluation code every strategy runs: loss, optimizer, one loop."""
