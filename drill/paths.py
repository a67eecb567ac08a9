"""Where drill's shipped data and the learner's progress live.

The shipped folders (questions/, exercises/) are subpackages of `drill` in an
installed wheel and top-level folders in a source checkout; importlib.resources
hides that difference, so nothing else needs to know.
"""

from __future__ import annotations

import os
from pathlib import Path


def _package_folder(name: str) -> Path:
    """A data subpackage's folder. The import system's spec knows it for a wheel and for an
    editable checkout alike; importlib.resources (with zipfile, ~10% of a quiz's start-up) is
    only the fallback for an install the spec cannot place on disk (a zip import)."""
    from importlib.util import find_spec

    spec = find_spec(name)
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if len(locations) == 1 and Path(locations[0]).is_dir():
        return Path(locations[0])
    from importlib import resources

    return Path(str(resources.files(name)))


def questions_dir() -> Path:
    """The question bank shipped with drill (one YAML file per topic)."""
    return _package_folder("drill.questions")


def exercises_dir() -> Path:
    """The starter files a learner copies with `drill start`."""
    return _package_folder("drill.exercises")


def data_home() -> Path:
    """Folder for the progress store: $DRILL_HOME, else the platform's user data dir."""
    override = os.environ.get("DRILL_HOME")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("drill", appauthor=False))
