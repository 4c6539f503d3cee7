"""The installed distribution: one top-level package, `strata`, beside other libraries.

The OpenAI Agents SDK installs a top-level `agents`; an app with its own `agents/` or
`memory/` folder is common too. The wheel must bring nothing but `strata` (with
`strata.graph`, `strata.agents`, ... inside), so both import side by side.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from servers import REPO

pytestmark = pytest.mark.slow

SUBPACKAGES = ["graph", "agents", "memory", "prompts", "evaluation"]


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout, built with the test venv's own setuptools (no download)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(REPO)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = out.glob("strata_memory-*.whl")
    return wheel


def shipped_files() -> dict[str, Path]:
    """Every file of the package's folders as the wheel should name it: the modules, and what they read at run
    time beside them (the demo's sample conversation, `py.typed`)."""
    folders = {"strata": REPO / "strata", **{f"strata/{sub}": REPO / sub for sub in SUBPACKAGES}}
    return {f"{prefix}/{path.relative_to(folder).as_posix()}": path for prefix, folder in folders.items()
            for path in folder.rglob("*") if path.is_file() and "__pycache__" not in path.parts}


def test_wheel_installs_one_top_level_package_beside_openai_agents(tmp_path: Path, offline_env: dict[str, str]) -> None:
    wheel = build_wheel(tmp_path / "dist")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"strata"}
    for sub in SUBPACKAGES:
        assert f"strata/{sub}/__init__.py" in names, f"strata.{sub} missing from the wheel"
    expected = shipped_files()
    assert {"strata/py.typed", "strata/data/sample_conversation.json"} <= set(expected)
    missing = sorted(set(expected) - set(names))
    assert not missing, f"missing from the wheel: {missing}"

    # A fresh venv: its own site-packages gets the wheel; the test venv's packages (openai-agents
    # and this project's dependencies) are visible through a .pth line, so nothing is downloaded.
    # The test venv's own editable install of strata is not: .pth files are read only in site dirs.
    fresh = tmp_path / "app-venv"
    env = {name: value for name, value in offline_env.items() if name != "PYTHONPATH"}  # the wheel's strata alone
    venv.EnvBuilder(with_pip=False).create(fresh)
    python = fresh / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, text=True, timeout=300)

    app = tmp_path / "app"
    (app / "agents").mkdir(parents=True)
    (app / "agents" / "__init__.py").write_text("WHOSE = 'the app'\n")
    (app / "memory").mkdir()
    (app / "memory" / "__init__.py").write_text("WHOSE = 'the app'\n")
    script = (
        "import importlib.util, agents, memory, strata, strata.agents, strata.graph.graph\n"
        "from strata import Memory\n"
        "print(agents.WHOSE, memory.WHOSE, strata.__file__, strata.agents.__file__, sep='|')\n"
    )
    out = subprocess.run([str(python), "-c", script], cwd=app, env=env, check=True, capture_output=True, text=True,
                         timeout=300).stdout.strip().split("|")
    assert out[:2] == ["the app", "the app"]
    assert out[2].startswith(site) and out[3].startswith(site)

    # The demo from the installed copy, outside the repository: it reads its sample from the package.
    demo = subprocess.run([str(fresh / "bin" / "strata"), "demo", "--questions", "1"], cwd=app, env=env,
                          capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stderr
    assert f"demo: {site}/strata/data/sample_conversation.json" in demo.stdout
    assert "gold evidence fully reached for" in demo.stdout

    sdk = ("from agents import Agent, Runner\nimport strata.agents.judge\nfrom strata import Memory\n"
           "print(Agent.__module__, strata.agents.judge.__name__)\n")
    printed = subprocess.run([str(python), "-c", sdk], cwd=tmp_path, env=env, check=True, capture_output=True,
                             text=True, timeout=300).stdout.split()
    assert printed == ["agents.agent", "strata.agents.judge"]
