"""patchkit's models run without pydantic plugins (cli/startup.py, without_pydantic_plugins).

A real plugin, installed the way pydantic finds plugins (a distribution's `pydantic` entry
point), records every value it is shown. The same interpreter with the same path first shows
that pydantic does load it for a model of its own; then `patchkit validate` of a recipe with
a secret runs, and the plugin is never asked for a validator, so it sees nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import PATCHKIT

PLUGIN = '''
import os

class _Spy:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, plugin_settings):
        with open(os.environ["SPY_LOG"], "a") as log:
            log.write(f"validator {schema_type!r}\\n")
        def seen(value, *args, **kwargs):
            with open(os.environ["SPY_LOG"], "a") as log:
                log.write(f"value {value!r}\\n")
        return type("H", (), {"on_enter": staticmethod(seen)})(), None, None

plugin = _Spy()
'''


def _installed_plugin(root: Path) -> Path:
    site = root / "site"
    (site / "spy_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "spy_plugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: spy-plugin\nVersion: 1.0\n")
    (site / "spy_plugin-1.0.dist-info" / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")
    (site / "spy_plugin.py").write_text(PLUGIN)
    return site


def test_a_pydantic_plugin_installed_beside_patchkit_never_sees_a_recipe(tmp_path: Path) -> None:
    site = _installed_plugin(tmp_path)
    log = tmp_path / "spy.log"
    env = {**os.environ, "PYTHONPATH": str(site), "SPY_LOG": str(log)}

    own_model = "import pydantic\nclass M(pydantic.BaseModel):\n    x: int\nM(x=1)\n"
    subprocess.run([sys.executable, "-c", own_model], env=env, check=True, timeout=60)
    assert "validator" in log.read_text()  # installed as pydantic finds plugins: it is loaded
    log.unlink()

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nvars: {token: s3cr3t-value}\nsteps:\n"
                      "  - name: c\n    check: {python: 'print(\"{{ token }}\")'}\n")
    proc = subprocess.run([PATCHKIT, "validate", str(recipe)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not log.exists(), log.read_text()  # never asked for a validator: saw no value, no secret
