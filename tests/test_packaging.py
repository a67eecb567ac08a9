"""A built wheel, installed on its own, carries the bank, the starters and the reference.

An editable install finds questions/, exercises/ and reference/ through the
source tree, which can hide a packaging mistake; this test builds the wheel and
installs it into a fresh venv that borrows only the third-party dependencies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_finds_its_data(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = dist.glob("drill-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Third-party deps come from the test's own environment (appended, so the wheel wins).
    (target / "borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, timeout=300)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["DRILL_HOME"] = str(tmp_path / "home")
    probe = (
        "import drill, drill.reference, drill.paths as p;"
        f"assert drill.reference.__file__.startswith({str(target)!r}), drill.reference.__file__;"
        "print(len(list(p.questions_dir().glob('*.yaml'))), len(list(p.exercises_dir().glob('*.py'))),"
        " int((p.exercises_dir() / 'README.md').is_file()))"
    )
    out = subprocess.run([str(py), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert str(ROOT) not in out.stdout
    n_yaml, n_py, contract = map(int, out.stdout.split())
    assert contract == 1  # the exercise contract (exercises/README.md) ships with the starters
    assert n_yaml == len(list((ROOT / "questions").glob("*.yaml")))
    assert n_py == len(list((ROOT / "exercises").glob("*.py")))

    help_out = subprocess.run(
        [str(py), "-c", "from drill.cli import main; main()", "--help"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120
    )
    assert help_out.returncode == 0 and "check" in help_out.stdout


def test_every_subpackage_is_listed_for_the_wheel() -> None:
    """pyproject lists packages explicitly (the top-level folders are remapped);
    a new drill/ subpackage missing from that list would vanish from the wheel."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "drill").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_every_path_in_the_readme_table_exists() -> None:
    """README "Where things are" named `drill/store.py` after the store became a package (issue 31)."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    paths = [row.split("|")[1].strip().strip("`") for row in table.splitlines() if row.startswith("| `")]
    assert len(paths) >= 10
    missing = [p for p in paths if not (ROOT / p).exists() or (p.endswith("/") != (ROOT / p).is_dir())]
    assert missing == [], missing
