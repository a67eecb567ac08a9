"""Where drill's shipped data and the learner's progress live.

The shipped folders (questions/, exercises/) are subpackages of `drill` in an
installed wheel and top-level folders in a source checkout; importlib.resources
hides that difference, so nothing else needs to know.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def questions_dir() -> Path:
    """The question bank shipped with drill (one YAML file per topic)."""
    return Path(str(resources.files("drill.questions")))


def exercises_dir() -> Path:
    """The starter files a learner copies with `drill start`."""
    return Path(str(resources.files("drill.exercises")))


def data_home() -> Path:
    """Folder for the progress store: $DRILL_HOME, else the platform's user data dir."""
    override = os.environ.get("DRILL_HOME")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("drill", appauthor=False))
