"""`patchkit test` end to end on toy releases: real pip, real agent, real CLI, no network.

Each release of the `toyllm` distribution is a real wheel built here into a find-links
folder; pip is pointed at it alone (no index, no user config), so the listing, the
downloads, the cache and the planning all run as they do against PyPI.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.helpers import (  # noqa: F401 - the `sandbox` fixture
    PKGS,
    Sandbox,
    recipe,
    review_page_in_chromium,
    run_patchkit,
    sandbox_fixture,
    write_wheel,
)

SPECULATIVE = (PKGS / "toyllm" / "toyllm" / "config" / "speculative.py").read_text()
MULTI_LINE = SPECULATIVE[SPECULATIVE.index("            eagle3_target_supported = ["):
                         SPECULATIVE.index("            ]\n") + len("            ]\n")]


def shaped(version: str) -> str:
    """toyllm/config/speculative.py as release `version` has it (shapes like FACTS.md's table)."""
    if version.startswith(("0.9.", "0.22")):  # no list at all: an inline test
        return SPECULATIVE.replace(MULTI_LINE, "").replace(
            "for supported in eagle3_target_supported", 'for supported in ["llama"]')
    if version.startswith("0.10"):  # one line; 0.10.2 has an unrelated line more above it
        line = '            eagle3_target_supported = ["llama", "qwen"]\n'
        text = SPECULATIVE.replace(MULTI_LINE, line)
        return text.replace('"""Configuration for speculative decoding."""',
                            '"""Configuration for speculative decoding.\n\n    More words.\n    """') \
            if version == "0.10.2" else text
    if version.startswith("0.18"):  # the names are there already
        return SPECULATIVE.replace('"afmoe",\n', '"afmoe",\n                "kimi_k2",\n                "deepseek_v3",\n')
    return SPECULATIVE  # 0.16: one item a line


def build_wheel(folder: Path, version: str, corrupt: bool = False) -> Path:
    if corrupt:
        wheel = folder / f"toyllm-{version}-py3-none-any.whl"
        wheel.write_bytes(b"not a zip")
        return wheel
    return write_wheel(folder, "toyllm", version, {
        "toyllm/__init__.py": (PKGS / "toyllm" / "toyllm" / "__init__.py").read_text(),
        "toyllm/_version.py": f'__version__ = "{version}"\nversion = __version__\n',
        "toyllm/config/__init__.py": (PKGS / "toyllm" / "toyllm" / "config" / "__init__.py").read_text(),
        "toyllm/config/speculative.py": shaped(version),
        "toyllm/config/model.py": (PKGS / "toyllm" / "toyllm" / "config" / "model.py").read_text(),
        "toyllm/unrelated.py": "x = 1\n",
    })


RELEASES = ["0.9.0", "0.10.0", "0.10.1", "0.10.2", "0.16.0", "0.18.0", "0.22.0"]


def pip_sees_only(links: Path, cache: Path) -> dict[str, str]:
    """The environment of a patchkit whose pip sees only a folder of wheels (no index, no config)."""
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links),
            "PATCHKIT_CACHE_DIR": str(cache)}


@pytest.fixture(name="index", scope="module")
def index_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Toy releases, and one cache for the module's tests (the first test fills it)."""
    root = tmp_path_factory.mktemp("toy-index")
    links = root / "links"
    links.mkdir()
    for version in RELEASES:
        build_wheel(links, version)
    return pip_sees_only(links, root / "cache")


@pytest.fixture(name="own_index")
def own_index_fixture(tmp_path: Path) -> dict[str, str]:
    """Toy releases and a cache of this test's own (a test that changes the releases)."""
    links = tmp_path / "links"
    links.mkdir()
    for version in RELEASES:
        build_wheel(links, version)
    return pip_sees_only(links, tmp_path / "cache")


def write_recipe(tmp_path: Path, versions: str, extra: str = "") -> str:
    path = tmp_path / "toy.yaml"
    path.write_text(f"""name: toy
steps:
  - name: preflight
    check: {{package: toyllm, python: "import toyllm"}}
  - name: whitelist
    patch:
      package: toyllm
      versions: "{versions}"
      modules: [toyllm.config.speculative, toyllm.config]
      edit:
        list_insert:
          names: [eagle3_target_supported, aux_hidden_states_supported]
          within: SpeculativeConfig._verify_args
          values: [kimi_k2, deepseek_v3]
          after: afmoe
{extra}  - name: serve
    launch: {{command: [toyllm], health: {{url: "http://127.0.0.1:1/health"}}}}
""")
    return str(path)


def test_every_release_gets_its_outcome_and_only_touchable_files_are_cached(tmp_path: Path,
                                                                          own_index: dict[str, str]) -> None:
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--json", "--jobs", "3",
                          env=own_index, timeout=180)
    assert result.returncode == 0, result
    doc = result.json()
    assert doc["recipe"] == "toy" and doc["dist"] == "toyllm"
    cells = doc["steps"]["whitelist"]["releases"]
    assert {v: c["status"] for v, c in cells.items()} == {
        "0.9.0": "skipped", "0.10.0": "skipped", "0.10.1": "changed", "0.10.2": "changed",
        "0.16.0": "changed", "0.18.0": "ok", "0.22.0": "skipped"}
    # The same edit of the same one-line list, three lines further down in 0.10.2: one diff.
    assert cells["0.10.1"]["diff_id"] == cells["0.10.2"]["diff_id"] != cells["0.16.0"]["diff_id"]
    assert cells["0.16.0"]["file"] == "toyllm/config/speculative.py"
    assert '+                "kimi_k2",' in doc["diffs"][cells["0.16.0"]["diff_id"]]
    # 0.10.0 has the list but is outside the range: the range may be too narrow.
    assert cells["0.10.0"]["outside_range"]["edit"] == "changed"
    assert doc["warnings"] == [(f"whitelist: 0.10.0 is outside >=0.10.1,<0.22, but the edit would still change it "
                               f"(diff {cells['0.10.0']['outside_range']['diff_id']}): the range may be too narrow")]
    assert doc["notes"] == [("whitelist: the newest release, 0.22.0, is past >=0.10.1,<0.22 (upstream may have "
                            "fixed it; there the edit finds no target)")]
    assert doc["steps"]["preflight"] == {"kind": "check", "tested": False, "releases": {},
                                         "message": doc["steps"]["preflight"]["message"]}
    assert "not testable offline" in doc["steps"]["preflight"]["message"]
    assert doc["steps"]["serve"]["message"].startswith("skipped")
    # Kept: the touchable files only; no wheel, no unrelated module, no model.py.
    cache = Path(own_index["PATCHKIT_CACHE_DIR"]) / "release-files" / "toyllm"
    kept = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file() and "files" in p.parts)
    assert kept == sorted(f"{v}/files/toyllm/{rel}" for v in RELEASES
                          for rel in ("__init__.py", "_version.py", "config/__init__.py", "config/speculative.py"))
    assert not list(Path(own_index["PATCHKIT_CACHE_DIR"]).rglob("*.whl"))

    # Warm: the same answer from the cache, without fetching anything.
    again = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--json", env=own_index, timeout=180)
    assert again.returncode == 0 and again.json()["steps"] == doc["steps"], again
    assert "fetched" not in again.stderr


def test_the_table_groups_releases_and_prints_each_diff_once(tmp_path: Path, index: dict[str, str]) -> None:
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), env=index, timeout=180)
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert "toy on toyllm: 7 releases (0.9.0..0.22.0)" in lines
    table = lines[:next(i for i, ln in enumerate(lines) if ln.startswith("diff "))]
    rows = [ln.split() for ln in table if ln.startswith("  ")]
    assert [(r[0], r[3] if r[1].startswith("(") else r[1]) for r in rows] == [
        ("0.9.0", "skipped"), ("0.10.0", "skipped"), ("0.10.1..0.10.2", "changed"), ("0.16.0", "changed"),
        ("0.18.0", "ok"), ("0.22.0", "skipped")]
    # 0.10.x's, 0.16.0's; what the edit would do to 0.10.0 (outside the range) is 0.10.x's diff
    assert [ln.split()[1] for ln in lines if ln.startswith("diff ")] == [rows[2][4], rows[3][2]]
    assert "serve (launch): skipped" in result.stdout


def test_a_range_that_reaches_a_release_without_the_target_fails_naming_it(tmp_path: Path, index: dict[str, str]) -> None:
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10,<0.25"), env=index, timeout=180)
    assert result.returncode == 1, result
    assert ("FAILED: whitelist: 0.22.0 is inside >=0.10,<0.25 and cannot be patched: toyllm 0.22.0: target not "
            "found") in result.stdout


def test_a_range_too_narrow_is_a_warning_and_strict_fails(tmp_path: Path, index: dict[str, str]) -> None:
    narrow = write_recipe(tmp_path, ">=0.10.2,<0.22")
    loose = run_patchkit("test", narrow, env=index, timeout=180)
    assert loose.returncode == 0, loose
    assert "warning: whitelist: 0.10.0..0.10.1 (2 releases) are outside >=0.10.2,<0.22, but the edit would " \
           "still change them" in loose.stdout
    strict = run_patchkit("test", narrow, "--strict", "--versions", "0.10.1,0.10.2", env=index, timeout=180)
    assert strict.returncode == 1, strict
    assert "0.10.1 is outside >=0.10.2,<0.22, but the edit would still change it" in strict.stdout


def test_a_later_step_sees_what_an_earlier_one_would_have_written(tmp_path: Path, index: dict[str, str]) -> None:
    """Step 2 removes what step 1 inserts: only on the chained copy is there anything to remove."""
    extra = """  - name: unlist-deepseek
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_remove:
          names: [eagle3_target_supported]
          within: SpeculativeConfig._verify_args
          values: [deepseek_v3]
"""
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22", extra), "--json",
                          "--versions", "0.10.1,0.16.0,0.22.0", env=index, timeout=180)
    assert result.returncode == 1, result
    doc = result.json()
    after = doc["steps"]["unlist-deepseek"]["releases"]
    assert after["0.10.1"]["status"] == after["0.16.0"]["status"] == "changed"
    assert after["0.22.0"]["status"] == "failed"  # no list there, and the step has no range
    assert '-                "deepseek_v3",' in doc["diffs"][after["0.16.0"]["diff_id"]]
    assert doc["failures"] == [(f"unlist-deepseek: 0.22.0 cannot be patched (the step has no version range): "
                               f"{after['0.22.0']['message']}")]


def test_a_wheel_that_cannot_be_read_is_an_error_and_the_others_go_on(tmp_path: Path,
                                                                       own_index: dict[str, str]) -> None:
    build_wheel(Path(own_index["PIP_FIND_LINKS"]), "0.11.0", corrupt=True)
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--json", "--versions", "0.10.1,0.11.0",
                          env=own_index, timeout=180)
    assert result.returncode == 1, result
    doc = result.json()
    cells = doc["steps"]["whitelist"]["releases"]
    assert cells["0.11.0"]["status"] == "error"
    assert cells["0.11.0"]["message"].startswith("cannot fetch toyllm==0.11.0: ERROR: ")  # pip's own words
    assert cells["0.10.1"]["status"] == "changed"
    assert doc["failures"][0].startswith("whitelist: 0.11.0 inside >=0.10.1,<0.22 could not be tested")


def test_an_unknown_distribution_is_pips_reason_and_exit_1(tmp_path: Path, index: dict[str, str]) -> None:
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--dist", "nosuchdist", env=index,
                          timeout=180)
    assert result.returncode == 1, result
    assert "pip index versions nosuchdist:" in result.stderr and "ERROR" in result.stderr


def test_a_dist_whose_wheels_hold_another_package_says_so(tmp_path: Path, own_index: dict[str, str]) -> None:
    links = Path(own_index["PIP_FIND_LINKS"])
    write_wheel(links, "otherllm", "0.11.0", {"otherllm/__init__.py": ""})
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--dist", "otherllm", "--json",
                          env=own_index, timeout=180)
    assert result.returncode == 1, result
    cell = result.json()["steps"]["whitelist"]["releases"]["0.11.0"]
    assert cell == {"status": "error", "message": "the wheel of otherllm 0.11.0 holds no package toyllm (is --dist right?)",
                    "diff_id": None}


def test_a_dist_that_looks_like_an_option_is_a_usage_error(tmp_path: Path, index: dict[str, str]) -> None:
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--dist=--index-url=http://x",
                          env=index)
    assert result.returncode == 2 and "is not a distribution name" in result.stderr, result


def test_installed_reads_the_hosts_release_and_writes_nothing(sandbox: Sandbox) -> None:
    files = sorted(p for p in sandbox.pkgs.rglob("*") if p.is_file())
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    result = run_patchkit("test", recipe("toyllm_eagle3.yaml"), "--versions", "installed", "--json",
                          "-i", str(sandbox.inventory), timeout=120)
    assert result.returncode == 0, result
    doc = result.json()
    cell = doc["steps"]["eagle3-whitelist"]["releases"]["0.16.0@local"]
    assert cell["status"] == "changed" and cell["host"] == "local"
    assert cell["file"] == "toyllm/config/speculative.py"
    assert doc["steps"]["fp32-dtype"]["releases"]["0.16.0@local"]["status"] == "changed"
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files} == before
    assert sorted(p for p in sandbox.pkgs.rglob("*") if p.is_file()) == files
    assert not sandbox.state.exists()


HOSTILE = '<script>window.__pwned = 1</script><img src="http://127.0.0.1:9/x.png" onerror="window.__pwned = 2">'


def hostile_recipe(tmp_path: Path, versions: str) -> str:
    """The toy recipe with markup in its description and in the value it inserts (so in every diff)."""
    path = Path(write_recipe(tmp_path, versions))
    text = path.read_text().replace("name: toy\n", f"name: toy\ndescription: {json.dumps('Reviewed ' + HOSTILE)}\n")
    path.write_text(text.replace("values: [kimi_k2, deepseek_v3]", f"values: [kimi_k2, {json.dumps(HOSTILE)}]"))
    return str(path)


def test_the_matrix_page_runs_and_loads_nothing_in_chromium(tmp_path: Path, index: dict[str, str]) -> None:
    page_file = tmp_path / "matrix.html"
    # >=0.10,<0.25 reaches 0.22.0, which has no list: a refusal on the page too
    result = run_patchkit("test", hostile_recipe(tmp_path, ">=0.10,<0.25"), "--html", str(page_file),
                          env=index, timeout=180)
    assert result.returncode == 1, result
    assert "FAILED: whitelist: 0.22.0" in result.stdout  # the table is still printed
    assert "<script" not in page_file.read_text()
    with review_page_in_chromium(page_file, "Reviewed " + HOSTILE) as (page, problems):
        grid = page.locator("table.grid tr[data-release]")
        assert grid.count() == len(RELEASES)
        statuses = {r: page.locator(f'td.cell[data-release="{r}"]').get_attribute("data-status") for r in RELEASES}
        assert statuses == {"0.9.0": "skipped", "0.10.0": "changed", "0.10.1": "changed", "0.10.2": "changed",
                            "0.16.0": "changed", "0.18.0": "changed", "0.22.0": "failed"}  # 0.18 lacks the markup
        assert page.locator('td.cell[data-release="0.22.0"]').inner_text().startswith("refused")
        assert "0.22.0" in page.inner_text(".attention")
        # 0.10.0..0.10.2 make one edit: one diff, naming the three releases
        headings = page.locator("h3.diff-releases")
        assert headings.count() == 3  # 0.10.x's, 0.16.0's, 0.18.0's
        assert "0.10.0..0.10.2 (3 releases)" in headings.first.inner_text()
        unified, split = page.locator(".unified").first, page.locator(".split").first
        assert unified.is_visible() and not split.is_visible()
        assert HOSTILE in unified.inner_text()  # a diff line of markup stays a line of text
        page.click("label[for=view-split]")
        assert split.is_visible() and not unified.is_visible()
        page.click('a[href^="#diff-whitelist-"]')  # a cell's diff id leads to its diff
        assert page.evaluate("location.hash").startswith("#diff-whitelist-")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1  # no page-wide scroll on a phone
        assert problems == [], problems


def test_the_matrix_markdown_goes_to_stdout_instead_of_the_table(tmp_path: Path, index: dict[str, str]) -> None:
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--markdown", "-", env=index, timeout=180)
    assert result.returncode == 0, result
    assert result.stdout.startswith("## patchkit test: toy\n") and "diff " not in result.stdout.splitlines()[0]
    assert "| 0.10.2 | applies `" in result.stdout and "| 0.18.0 | already: " in result.stdout
    assert not any(ln.startswith("  0.") for ln in result.stdout.splitlines())  # not the table


def test_matrix_review_outputs_are_checked_before_anything_is_fetched(tmp_path: Path, own_index: dict[str, str]) -> None:
    recipe_file = write_recipe(tmp_path, ">=0.10.1,<0.22")
    result = run_patchkit("test", recipe_file, "--html", str(tmp_path / "no" / "such" / "m.html"), env=own_index)
    assert result.returncode == 2 and "--html" in result.stderr and "no folder" in result.stderr, result
    result = run_patchkit("test", recipe_file, "--markdown", "-", "--json", env=own_index)
    assert result.returncode == 2 and "stdout" in result.stderr, result
    assert not Path(own_index["PATCHKIT_CACHE_DIR"]).exists()  # nothing fetched


def _edit_entries(cache: Path, change) -> int:
    """Apply `change` to every release-plans entry (whatever its shape); how many there were."""
    entries = sorted((cache / "release-plans").glob("*.json"))
    for entry in entries:
        entry.write_text(json.dumps(change(json.loads(entry.read_text()))))
    return len(entries)


def test_an_edited_outcome_entry_never_turns_failed_into_ok(tmp_path: Path, own_index: dict[str, str]) -> None:
    recipe_file = write_recipe(tmp_path, ">=0.10,<0.25")  # reaches 0.22.0, which has no list
    first = run_patchkit("test", recipe_file, "--versions", "0.16.0,0.22.0", env=own_index, timeout=180)
    assert first.returncode == 1 and "FAILED: whitelist: 0.22.0 is inside" in first.stdout, first

    def failed_to_ok(value):
        if isinstance(value, dict):
            if value.get("status") == "failed":
                return {**value, "status": "ok", "message": "already in place"}
            return {k: failed_to_ok(v) for k, v in value.items()}
        return [failed_to_ok(v) for v in value] if isinstance(value, list) else value

    assert _edit_entries(Path(own_index["PATCHKIT_CACHE_DIR"]), failed_to_ok) == 2
    again = run_patchkit("test", recipe_file, "--versions", "0.16.0,0.22.0", env=own_index, timeout=180)
    assert again.returncode == 1 and "FAILED: whitelist: 0.22.0 is inside" in again.stdout, again


@pytest.mark.parametrize("content", [[], {}, {"0.22.0": "x"}, {"plans": [], "seal": 1}, "text"])
def test_a_malformed_outcome_entry_is_planned_again(tmp_path: Path, own_index: dict[str, str], content) -> None:
    recipe_file = write_recipe(tmp_path, ">=0.10.1,<0.22")
    first = run_patchkit("test", recipe_file, "--versions", "0.16.0", "--json", env=own_index, timeout=180)
    assert first.returncode == 0, first
    assert _edit_entries(Path(own_index["PATCHKIT_CACHE_DIR"]), lambda _: content) == 1
    again = run_patchkit("test", recipe_file, "--versions", "0.16.0", "--json", env=own_index, timeout=180)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again
    assert again.json()["steps"] == first.json()["steps"]


def test_a_wheel_in_the_cache_is_used_only_when_the_index_has_its_hash(tmp_path: Path, own_index: dict[str, str]) -> None:
    """A 0.16.0 wheel dropped into the cache's wheels/ with 0.18.0's content (the names already
    listed) must not make 0.16.0 look patched; the index's own wheel there is used as is."""
    wheels = Path(own_index["PATCHKIT_CACHE_DIR"]) / "wheels"
    wheels.mkdir(parents=True)
    dropped = wheels / "toyllm-0.16.0-py3-none-any.whl"
    with zipfile.ZipFile(dropped, "w") as archive:
        archive.writestr("toyllm/_version.py", '__version__ = "0.16.0"\n')
        archive.writestr("toyllm/__init__.py", "")
        archive.writestr("toyllm/config/__init__.py", "")
        archive.writestr("toyllm/config/speculative.py", shaped("0.18.0"))
    recipe_file = write_recipe(tmp_path, ">=0.10.1,<0.22")
    result = run_patchkit("test", recipe_file, "--versions", "0.16.0", "--json", env=own_index, timeout=180)
    assert result.returncode == 0, result
    assert result.json()["steps"]["whitelist"]["releases"]["0.16.0"]["status"] == "changed", result
    assert "fetched toyllm 0.16.0" in result.stderr  # the index's wheel, not the dropped one

    # The index's very file in wheels/: used, nothing fetched.
    genuine = Path(own_index["PIP_FIND_LINKS"]) / "toyllm-0.10.1-py3-none-any.whl"
    shutil.copyfile(genuine, wheels / genuine.name)
    used = run_patchkit("test", recipe_file, "--versions", "0.10.1", "--json", env=own_index, timeout=180)
    assert used.returncode == 0 and "fetched" not in used.stderr, used
    assert used.json()["steps"]["whitelist"]["releases"]["0.10.1"]["status"] == "changed"


def test_a_release_without_a_version_file_is_judged_by_its_own_version(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    wheel = build_wheel(links, "0.22.0")  # no list: inside the range it fails, outside it is skipped
    stripped = links / "stripped.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(stripped, "w") as out:
        for name in src.namelist():
            if name == "toyllm/_version.py":
                continue
            text = src.read(name)
            out.writestr(name, b'"""toyllm"""\n' if name == "toyllm/__init__.py" else text)
    stripped.replace(wheel)
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--json",
                          env=pip_sees_only(links, tmp_path / "cache"), timeout=180)
    assert result.returncode == 0, result
    cell = result.json()["steps"]["whitelist"]["releases"]["0.22.0"]
    assert cell["status"] == "skipped" and "toyllm 0.22.0 is outside >=0.10.1,<0.22" in cell["message"], cell


@pytest.mark.parametrize("damage", ["kept file", "index.json []", "index.json edited"])
def test_a_changed_kept_file_or_index_is_fetched_again(tmp_path: Path, own_index: dict[str, str], damage: str) -> None:
    """The kept files are checked against the sealed index of the release: 0.16.0's speculative.py
    swapped for 0.18.0's (the names already listed) must not make 0.16.0 look patched."""
    recipe_file = write_recipe(tmp_path, ">=0.10.1,<0.22")
    first = run_patchkit("test", recipe_file, "--versions", "0.16.0", "--json", env=own_index, timeout=180)
    assert first.returncode == 0, first
    folder = Path(own_index["PATCHKIT_CACHE_DIR"]) / "release-files" / "toyllm" / "0.16.0"
    if damage == "kept file":
        (folder / "files" / "toyllm" / "config" / "speculative.py").write_text(shaped("0.18.0"))
    elif damage == "index.json []":
        (folder / "index.json").write_text("[]")
    else:
        index = json.loads((folder / "index.json").read_text())
        index["py"] = []  # "the wheel has none of the files": nothing would ever be fetched
        (folder / "index.json").write_text(json.dumps(index))
    again = run_patchkit("test", recipe_file, "--versions", "0.16.0", "--json", env=own_index, timeout=180)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again
    assert "fetched toyllm 0.16.0" in again.stderr
    assert again.json()["steps"] == first.json()["steps"]


def test_the_matrix_says_the_checks_did_not_run_offline(tmp_path: Path, index: dict[str, str]) -> None:
    path = Path(write_recipe(tmp_path, ">=0.10.1,<0.22"))
    path.write_text(path.read_text().replace(
        "          after: afmoe\n",
        "          after: afmoe\n    verify: {import: [toyllm.config.speculative], python: 'import toyllm'}\n", 1))
    assert "verify:" in path.read_text()
    result = run_patchkit("test", str(path), env=index, timeout=180)
    assert result.returncode == 0, result
    assert ("note: whitelist: `changed` says the edit applies to that release's files; its import check and its "
            "verify program did not run (planned offline: they run on each host when applied)") in result.stdout
    plain = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), env=index, timeout=180)
    assert "did not run (planned offline" not in plain.stdout  # no checks, nothing to say
