"""The engine: the only code that touches envs, devices and streams."""
