"""Starting, watching and stopping worker processes: the only place that knows about start
methods, signals and exit codes."""
