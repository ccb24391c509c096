"""What comes out of a run: per-epoch metrics, files in --out, and the console display."""
