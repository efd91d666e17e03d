"""The run/API layer: the engine composed with fasteval's parts, ``evaluate``/``Evaluator``,
run folders and their crash-safe logs, config files, sinks and saved episodes."""
