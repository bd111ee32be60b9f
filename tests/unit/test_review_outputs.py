"""What a reviewer is shown, pure: hidden characters made visible and counted, Markdown that
pings and links no one, fences no content closes, and output files written whole and never
through a symlink.

Reports are built here with a Trojan-Source diff (a bidi override that shows `is_admin` code
in another order than Python reads it), rendered by the real review/report code, and read back
with the standard library's HTML parser and a CommonMark parser (markdown-it-py).
"""

from __future__ import annotations

import io
import os
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from patchkit.base.errors import UsageError
from patchkit.commands.outfile import OutputError, check_output, write_output
from patchkit.recipe.model import LoadedRecipe, recipe_model
from patchkit.commands.releasetest.matrix import Cell, StepMatrix, verdicts
from patchkit.commands.releasetest import review as matrix_review
from patchkit.report.output import print_human, print_plain
from patchkit.run.results import HostResult, RunReport, StepResult
from patchkit.base.reveal import Reveal, reveal
from patchkit.report.review import build_review, md_code, md_fence, md_text, render_html, render_markdown

RLO, LRI, PDI, ZWSP, LS = "\u202e", "\u2066", "\u2069", "\u200b", "\u2028"
# The classic: to the eye the comment ends the line and the check stays; to Python the
# override reorders nothing in the bytes, the `return` sits inside the string.
TROJAN = (f"--- a/toyllm/auth.py\n+++ b/toyllm/auth.py\n@@ -1,2 +1,2 @@\n def ok(user):\n"
          f'-    return user.is_admin\n+    return user.is_admin  # "{RLO} {LRI}" ; return True {PDI}{ZWSP}\n')
# 4 hidden characters in the diff, 1 in a message; the diff is shared by two hosts: counted once
MESSAGE = f"added {LS}one value"


def report(diff: str = TROJAN, message: str = MESSAGE, why: str | None = None) -> RunReport:
    def step() -> StepResult:
        return StepResult(name="auth", kind="patch", status="changed", message=message, diff=diff, why=why)
    hosts = {name: HostResult(status="changed", steps=[step()]) for name in ("gpu-1", "gpu-2")}
    return RunReport(recipe="r", run_id="20261206-1", dry_run=True, command="plan", hosts=hosts).count()


def loaded(description: str = "d", why: str | None = None) -> LoadedRecipe:
    step = {"name": "auth", "patch": {"package": "toyllm", "modules": ["toyllm.auth"],
                                      "edit": {"list_insert": {"names": ["x"], "values": ["y"]}}}}
    if why:
        step["why"] = why
    recipe = recipe_model().model_validate({"name": "r", "description": description, "steps": [step]})
    return LoadedRecipe(recipe=recipe, path=Path("r.yaml"), content_sha256="ab" * 32, variables={})


def raw_hidden(text: str) -> list[str]:
    """The characters of `text` a reader would not see (as the review outputs must never show them)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c not in "\t\n"]


# ---------------------------------------------------------------- reveal


def test_every_control_format_and_separator_character_is_shown_and_nothing_else() -> None:
    hidden = [chr(c) for c in range(0x110000)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp") and chr(c) not in "\t\n"]
    for char in hidden:
        assert reveal(f"a{char}b") == f"a<U+{ord(char):04X}>b", hex(ord(char))
    for invisible in ("\u3164", "\u115f", "\ufe00", "\U000e0100", "\u034f"):  # fillers, selectors: blank too
        assert reveal(invisible) == f"<U+{ord(invisible):04X}>"
    shown = "tab\there\nnext\r\nCRLF, caf\u00e9, \u05e9\u05dc\u05d5\u05dd, \u2764\ufe0f, <U+202E> typed"
    assert reveal(shown) == shown  # text a reader does see, a line ending, an emoji's look: untouched
    assert reveal("\ufeffimport x") == "\ufeffimport x"  # a BOM at the start of the text is no secret
    assert reveal("a\rb") == "a<U+000D>b" and reveal("\x1b[2J") == "<U+001B>[2J"


def test_reveal_counts_and_warns_only_when_it_found_something() -> None:
    shown = Reveal()
    assert shown("plain") == "plain" and shown.warning("plan") is None
    shown(TROJAN)
    shown(MESSAGE)
    assert shown.found == 5
    assert shown.warning("plan") == ("warning: this plan contains 5 hidden or bidirectional control characters, "
                                     "shown as <U+XXXX>: the code may not be what it looks like in an editor")


# ---------------------------------------------------------------- the review page and Markdown


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.marked: list[str] = []  # text inside <span class="hidden-char">
        self.first_block: str | None = None  # class of the first <div> in <main>
        self._in_mark = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        cls = dict(attrs).get("class") or ""
        if tag == "div" and self.first_block is None:
            self.first_block = cls
        self._in_mark = tag == "span" and cls == "hidden-char"

    def handle_endtag(self, tag: str) -> None:
        self._in_mark = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_mark:
            self.marked.append(data)


def test_the_page_shows_each_hidden_character_marked_and_warns_first() -> None:
    review = build_review(report(), loaded())
    assert review.hidden == 5  # the diff shared by two hosts counted once, plus the message
    page = Page()
    page.feed(render_html(review))
    text = "".join(page.text)
    assert raw_hidden(text) == []
    assert page.first_block == "attention hidden-chars"  # before the summary, hosts and steps
    assert "this plan contains 5 hidden or bidirectional control characters" in text
    assert "<U+202E>" in text and "<U+2066>" in text and "<U+2069>" in text and "<U+200B>" in text
    assert "added <U+2028>one value" in text
    # each one marked out: in the diff, unified and side by side (4 in each view), and in the message
    assert page.marked.count("<U+202E>") == 2 and page.marked.count("<U+2028>") == 1 and len(page.marked) == 9


def test_a_page_without_hidden_characters_has_no_warning() -> None:
    clean = TROJAN.replace(RLO, "").replace(LRI, "").replace(PDI, "").replace(ZWSP, "")
    review = build_review(report(clean, "added one value"), loaded())
    assert review.hidden == 0 and review.warning is None
    assert "hidden-chars" not in render_html(review) and "[!WARNING]" not in render_markdown(review)


def test_the_markdown_warns_first_and_holds_no_hidden_character() -> None:
    text = render_markdown(build_review(report(), loaded()))
    assert raw_hidden(text) == []
    lines = text.splitlines()
    assert lines[2:4] == ["> [!WARNING]", "> warning: this plan contains 5 hidden or bidirectional control characters, "
                          "shown as &lt;U+XXXX&gt;: the code may not be what it looks like in an editor"]
    fence = [t for t in MarkdownIt("commonmark").parse(text) if t.type == "fence"]
    assert len(fence) == 1 and '"<U+202E> <U+2066>" ; return True <U+2069><U+200B>' in fence[0].content


LIVE = ["@octo-org/security-team", "@alice", "https://example.com/a?b=1", "http://127.0.0.1:9/x",
        "www.example.com/path", "ops@example.com", "#1234", "octo-org/repo#56", "GH-78", "mailto:x@example.com"]


def _outside_code(markdown: str) -> str:
    """All text a GitHub-flavoured renderer reads as prose: inline text tokens, not code spans or fences."""
    out = []
    for token in MarkdownIt("commonmark").enable("table").parse(markdown):
        for child in token.children or []:
            if child.type == "text":
                out.append(child.content)
        if token.type == "html_block":
            out.append(token.content.replace("<code>", "\0").split("\0")[0])
    return "\n".join(out)


def test_markdown_shows_mentions_references_and_links_as_code_and_nothing_else_changes() -> None:
    prose = "cc " + ", ".join(LIVE) + " (thanks)"
    text = render_markdown(build_review(report(message=prose, why=prose), loaded(description=prose)))
    outside = _outside_code(text)
    for live in LIVE:
        assert live not in outside, live  # never prose: no ping, no cross-reference, no autolink
        assert f"`{live}`" in text, live  # shown whole, as code
    assert "@" not in outside and "://" not in outside and "www." not in outside
    assert text.count("cc `@octo-org/security-team`, `@alice`,") == 3  # description, why, message
    # in a table cell too: a URL stops before `|`, which stays escaped: the row keeps its cells
    assert md_text("see https://x.example/a|b") == "see `https://x.example/a`\\|b"
    assert md_text("user@host and a@b and x@y.z") == "user@host and a@b and `x@y.z`"  # no domain: no link


def test_no_content_closes_a_fence_or_a_code_span() -> None:
    hostile = "```\n</details>\n@everyone\n````\n~~~\n````diff\n"  # a bare run of 4 closes a fence of 4
    block = md_fence(hostile, "diff")
    tokens = MarkdownIt("commonmark").parse(f"before\n\n{block}\n\nafter\n")
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content == hostile and fences[0].info == "diff"
    assert [t.content for t in tokens if t.type == "inline"] == ["before", "after"]
    for span in ("a`b", "``x``", "`", " padded ", "x"):
        inline = MarkdownIt("commonmark").parseInline(md_code(span))[0].children
        assert [(c.type, c.content) for c in inline or []] == [("code_inline", span)], span


def test_the_release_matrix_page_and_markdown_reveal_and_warn_too() -> None:
    recipe = loaded(description=f"matrix {RLO}x")
    step = recipe.recipe.steps[0]
    cells = [Cell("0.10.1", "changed", "added", diff_id="aaaa1111", file="toyllm/auth.py"),
             Cell("0.11.0", "failed", f"target not found {ZWSP}")]
    matrices = [StepMatrix(step, "toyllm", cells)]
    review = matrix_review.build_matrix_review(recipe, matrices, {"aaaa1111": TROJAN}, verdicts(matrices),
                                               {"toyllm": ["0.10.1", "0.11.0"]})
    assert review.hidden == 9  # the diff's 4 once, the description's 1, the refusal's 1 where it is shown
    page = Page()
    page.feed(matrix_review.render_html(review))
    assert raw_hidden("".join(page.text)) == [] and page.first_block == "attention hidden-chars"
    assert "this page contains 9 hidden" in "".join(page.text)
    markdown = matrix_review.render_markdown(review)
    assert raw_hidden(markdown) == [] and markdown.splitlines()[2] == "> [!WARNING]"


# ---------------------------------------------------------------- the terminal


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_plain_report_warns_first_and_shows_no_hidden_character() -> None:
    out = io.StringIO()
    print_plain(report(), out)
    text = out.getvalue()
    assert raw_hidden(text) == []
    assert text.splitlines()[0] == ("# warning: this plan contains 6 hidden or bidirectional control characters, "
                                    "shown as <U+XXXX>: the code may not be what it looks like in an editor")
    assert "gpu-1\tauth\tchanged\tadded <U+2028>one value" in text  # one line, as Python would read it


def test_the_terminal_report_warns_first_shows_no_hidden_character_and_reads_no_markup() -> None:
    out = Terminal()
    print_human(report(message=f"[link=https://x]c[/link] [/b] {LS}"), out)
    text = out.getvalue()
    assert raw_hidden(text.replace("\x1b", "")) == []  # only the console's own colour codes
    assert "this plan contains 6 hidden or bidirectional control characters" in text.splitlines()[0]
    assert "[link=https://x]c[/link] [/b] <U+2028>" in text  # as written: no link, no error
    assert "\x1b]8;" not in text  # no terminal hyperlink


def test_the_progress_shows_a_failure_as_written_with_its_hidden_characters_marked() -> None:
    from rich.console import Console

    from patchkit.run.fanout import LineProgress, LiveProgress

    failed = HostResult(status="failed", message=f"check said [/b] [link=https://x]c[/link] {RLO}")
    console = Console(file=io.StringIO(), force_terminal=True, width=100, height=40)
    live = LiveProgress(["a", "b"], console=console)  # a small fleet: a row per host
    live.started("a")
    live.finished("a", failed)  # drawn: no MarkupError, no hyperlink
    rows = [list(map(str, column._cells)) for column in live._render().columns]
    live.close()
    assert rows[1][0] == "failed" and "\x1b]8;" not in console.file.getvalue()  # type: ignore[attr-defined]
    big = LiveProgress([f"h{i}" for i in range(30)], console=Console(file=io.StringIO(), force_terminal=True))
    big.finished("h1", failed)  # a big fleet lists the failed hosts with their message
    shown = [str(cell) for cell in big._render().columns[1]._cells]
    big.close()
    assert f"failed: check said [/b] [link=https://x]c[/link] <U+202E>" in shown
    lines = io.StringIO()
    plain = LineProgress(2, out=lines)
    plain.finished("a", failed)
    assert lines.getvalue() == "[1/2] a: failed — check said [/b] [link=https://x]c[/link] <U+202E>\n"


# ---------------------------------------------------------------- output files


def test_an_output_file_is_replaced_whole_its_mode_kept_and_nothing_else_left(tmp_path: Path) -> None:
    target = tmp_path / "plan.html"
    write_output(target, "first", "--html")
    assert target.read_text() == "first" and oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    target.chmod(0o600)
    inode = target.stat().st_ino
    write_output(target, "second", "--html")
    assert target.read_text() == "second" and target.stat().st_mode & 0o777 == 0o600
    assert target.stat().st_ino != inode  # a new file renamed over it, never written in place
    assert os.listdir(tmp_path) == ["plan.html"]  # no temporary file left


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_symlink_at_the_output_is_refused_before_and_at_the_write(tmp_path: Path) -> None:
    victim = tmp_path / "victim.py"
    victim.write_text("SAFE = True\n")
    link = tmp_path / "plan.html"
    link.symlink_to(victim)
    with pytest.raises(UsageError, match="is a symlink .* does not write through a symlink"):
        check_output(str(link), "--html")
    with pytest.raises(OutputError, match="is a symlink"):
        write_output(link, "report", "--html")
    dangling = tmp_path / "plan.md"
    dangling.symlink_to(tmp_path / "created-elsewhere")
    with pytest.raises(OutputError, match="is a symlink"):
        write_output(dangling, "report", "--markdown")
    assert victim.read_text() == "SAFE = True\n" and link.is_symlink() and not (tmp_path / "created-elsewhere").exists()
    assert sorted(os.listdir(tmp_path)) == ["plan.html", "plan.md", "victim.py"]


@pytest.mark.parametrize(("path", "why"), [
    ("/", "names a folder"), ("{tmp}", "is a folder"), ("{tmp}/", "names a folder"), ("", "an empty path"),
    ("/dev/null", "not a regular file"), ("{tmp}/no/such/plan.html", "no folder"),
    ("/proc/plan.html", "cannot write in /proc"),
])
def test_an_output_path_that_cannot_be_written_is_one_usage_line(tmp_path: Path, path: str, why: str) -> None:
    path = path.format(tmp=tmp_path)
    with pytest.raises(UsageError) as refused:
        check_output(path, "--html")
    assert why in str(refused.value) and "\n" not in str(refused.value), refused.value
    with pytest.raises(OutputError):
        write_output(path, "x", "--html")
    assert os.listdir(tmp_path) == []


def test_an_output_that_must_be_new_is_never_written_over(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("edited by hand\n")
    with pytest.raises(UsageError, match="already exists"):
        check_output(str(recipe), "-o", replace=False)
    with pytest.raises(OutputError, match="already exists"):
        write_output(recipe, "captured", "-o", replace=False)
    write_output(tmp_path / "new.yaml", "captured", "-o", replace=False)
    assert recipe.read_text() == "edited by hand\n" and (tmp_path / "new.yaml").read_text() == "captured"
    assert sorted(os.listdir(tmp_path)) == ["new.yaml", "r.yaml"]


def test_what_appears_at_the_path_during_the_run_is_never_written_through_or_over(tmp_path: Path) -> None:
    """The last step of a write, once the checks passed and another process made a file or a
    link at the path meanwhile: a new file is linked, never renamed, over it; a link is refused."""
    from patchkit.commands.outfile import _place

    victim = tmp_path / "victim.py"
    victim.write_text("SAFE = True\n")
    (tmp_path / "r.yaml").write_text("made meanwhile\n")
    (tmp_path / "plan.html").symlink_to(victim)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for temp in (".t1", ".t2"):
            (tmp_path / temp).write_text("ours\n")
        with pytest.raises(FileExistsError):
            _place(folder, ".t1", "r.yaml", replace=False)
        with pytest.raises(OSError, match="appeared there meanwhile"):
            _place(folder, ".t2", "plan.html", replace=True)
    finally:
        os.close(folder)
    assert (tmp_path / "r.yaml").read_text() == "made meanwhile\n" and victim.read_text() == "SAFE = True\n"
    assert (tmp_path / "plan.html").is_symlink()
