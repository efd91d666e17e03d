"""Read a YAML, JSON or TOML file whose top level is a mapping: eval configs and sweep specs alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")


def read_mapping_file(path: str | Path, *, what: str, error: type[Exception], yaml_hint: str,
                      top_level: str = "a mapping") -> dict[str, Any]:
    """Parse a YAML/JSON/TOML file whose top level is a mapping. Shared by eval configs and sweep specs.

    Every failure raises ``error`` with a message that names ``what`` and the file, says what was
    expected, and (for a missing parser) what to install.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise error(f"{what} {str(path)!r}: expected a {', '.join(CONFIG_SUFFIXES)} file, got suffix {suffix!r}.")
    try:
        text = path.read_text()
    except OSError as exc:
        raise error(f"{what} {str(path)!r}: cannot read it ({exc}).") from None
    try:
        if suffix == ".json":
            data = json.loads(text)
        elif suffix == ".toml":
            try:
                import tomllib as toml
            except ImportError:  # Python 3.10
                try:
                    import tomli as toml
                except ImportError:
                    raise error(f"{what} {str(path)!r} is TOML, which on Python 3.10 needs tomli: pip install tomli "
                                "(or write it as .json).") from None
            data = toml.loads(text)
        else:
            try:
                import yaml
            except ImportError:
                raise error(f"{what} {str(path)!r} is YAML, which needs PyYAML: {yaml_hint} (or write it as .json).") from None
            data = yaml.safe_load(text)
    except error:
        raise
    except Exception as exc:  # the parsers' own messages carry line numbers
        raise error(f"{what} {str(path)!r}: could not parse it as {suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise error(f"{what} {str(path)!r}: expected {top_level} at the top level, got {type(data).__name__}.")
    return data
