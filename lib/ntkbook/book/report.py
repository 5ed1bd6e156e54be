"""Small helpers chapters use to show results: figures, Markdown tables, and the boxes every
chapter shows under its title (how to re-run it, where its numbers come from). Number formats
are :mod:`ntkbook.numbers`; :func:`typeset` gives text built from results one typography (true
minus, arrows, inequalities, times) wherever the book renders it."""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

__all__ = ["show", "typeset", "typeset_characters", "markdown_table", "MarkdownText", "preset_of", "device_label",
           "source_code", "provenance_line", "about_these_numbers", "opening", "chapter_knobs", "run_this_chapter"]

#: resolution (dots per inch) at which :func:`show` renders a figure: twice the 100 CSS px per inch at
#: which the page shows it (a 2x, "retina" image, sharp on high-density screens and when opened
#: full size). The plotting package sizes figures for it (``ntkbook.plotting.DPI``, the same number).
FIGURE_DPI = 200
#: PNG text keys :func:`show` writes: the smallest font size (pt) on the figure and the dpi; the
#: browser check reads them to compute the displayed text size
#: (``min_font_pt * dpi / 72 * displayed width / pixel width``, in CSS px)
PNG_MIN_FONT_KEY, PNG_DPI_KEY = "ntkbook:min_font_pt", "ntkbook:dpi"


def min_font_pt(fig, *, draw: bool = True) -> float:
    """Smallest font size (pt) of the text a reader sees on ``fig``: every visible, non-empty text
    artist (titles, labels, tick labels, legends, annotations, colorbar labels) on a visible axes;
    ``inf`` if there is none. Draws the figure first (tick labels get their text when drawn),
    unless ``draw=False`` (it has just been drawn, e.g. saved)."""
    import matplotlib.text

    if draw:
        fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())]
    return min(sizes, default=float("inf"))


def show(fig):
    """The figure as the cell's output: rendered to a PNG at :data:`FIGURE_DPI` and displayed at
    half its pixel width (a 2x image: only the width is set, the height follows), then closed (so
    the inline backend does not draw it again).

    The PNG carries two text entries, :data:`PNG_MIN_FONT_KEY` (:func:`min_font_pt`) and
    :data:`PNG_DPI_KEY`, from which the browser check computes the size of the smallest text as
    displayed. Returns an :class:`IPython.display.Image` (``glue(name, show(fig))`` stores it).
    """
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    # the sizes read after the save, which drew the figure (no draw of its own)
    png = _with_text(buf.getvalue(), {PNG_MIN_FONT_KEY: f"{min_font_pt(fig, draw=False):g}",
                                      PNG_DPI_KEY: str(FIGURE_DPI)})
    plt.close(fig)
    # half the pixel width (a 2x image) and no height, so that a narrower column scales the image
    # down with its aspect ratio kept (a fixed height would squash it)
    return Image(data=png, format="png", width=int.from_bytes(png[16:20], "big") // 2)


def _with_text(png: bytes, entries: dict[str, str]) -> bytes:
    """``png`` with a ``tEXt`` chunk per entry, placed right after its header chunk (IHDR)."""
    import struct
    import zlib

    (n,) = struct.unpack(">I", png[8:12])
    end = 8 + 12 + n  # signature, then IHDR: length, type, data, CRC
    chunks = b""
    for key, value in entries.items():
        body = b"tEXt" + key.encode("latin-1") + b"\0" + value.encode("latin-1")
        chunks += struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    return png[:end] + chunks + png[end:]


# Spans typeset() leaves alone: code spans (and roles such as {ref}`x <sec-y>`), display and
# inline math, URLs.
_PROTECTED = re.compile(r"(`+).+?\1|\$\$.+?\$\$|\$[^$\n]+\$|<?https?://[^\s>)]+>?", re.S)
# plain-text transposes of single capital letters, e.g. "X X^T X" or "J^T J"
_PLAIN_TEX = re.compile(r"(?<![\w$\\])((?:[A-Z](?:\^T)? )*[A-Z]\^T(?: [A-Z](?:\^T)?)*)(?![\w$^])")
_TYPESET = (
    (re.compile(r"<->"), "↔"),
    (re.compile(r"(?<![<-])->"), "→"),
    (re.compile(r">="), "≥"),
    (re.compile(r"<="), "≤"),
    (re.compile(r"!="), "≠"),
    # a hyphen-minus that starts a number (not one inside a word, a date or a range: PGD-10,
    # 2026-11-30, 57-112)
    (re.compile(r"(?<![\w.\-/^−])-(?=\.?\d)"), "−"),
    # a factor: 1.9x, 2x (not 3x3, 0x1f or a word)
    (re.compile(r"(?<=\d)x(?![\w.])|(?<=\d)x(?=\.(?!\d))"), "×"),
    (re.compile(r"(?<=\d) x (?=\d)"), " × "),
)


def typeset(text: str) -> str:
    """``text`` built from results (scorecard rows, claim lines, table cells), in the book's one
    typography: true minus in numbers (−0.34), →, ≥, ≤, ≠, × for factors (1.9×), and plain-text
    transposes of matrices as math ("X X^T X" becomes ``$X X^\\top X$``). Code spans and roles
    (`` `mnist_3v8` ``, ``{ref}`...` ``), math (``$...$``) and URLs are left as they are, and so
    are identifiers and dates (``fgsm-pgd``, ``PGD-10``, ``2026-11-30``)::

        typeset("slope -0.340; ratio 1.9x (>= 6x); 27.3 -> 31.3 %")
        # 'slope −0.340; ratio 1.9× (≥ 6×); 27.3 → 31.3 %'
    """
    out, last = [], 0
    text = str(text)
    for m in _PROTECTED.finditer(text):
        out.append(_typeset_plain(text[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_typeset_plain(text[last:]))
    return "".join(out)


def typeset_characters(text: str) -> str:
    """The character rules of :func:`typeset` alone (minus, arrows, inequalities, ×), for text
    that is already parsed (the build applies it to every text node of a page outside code and
    math)."""
    for pattern, repl in _TYPESET:
        text = pattern.sub(repl, text)
    return text


def _typeset_plain(text: str) -> str:
    text = typeset_characters(text)
    return _PLAIN_TEX.sub(lambda m: "$" + m.group(1).replace("^T", "^\\top") + "$", text)


def _table_cell(cell: Any) -> str:
    """One cell of a Markdown table: typeset, on one line, with its pipes escaped (a bare ``|``,
    e.g. in ``|I|``, would split the cell; GFM tables unescape ``\\|`` also inside math)."""
    text = typeset(str(cell)).replace("\n", " ")
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], caption: str | None = None):
    """A Markdown table (rendered as MyST by the book) from a header and rows of cells, each cell
    :func:`typeset` and with its pipes escaped. With ``caption`` ("**Table 4.2.** What ...") the
    caption is printed above the table, the book's style for numbered tables."""
    from IPython.display import Markdown

    lines = [caption, ""] if caption else []
    lines += ["| " + " | ".join(_table_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_table_cell(c) for c in r) + " |" for r in rows]
    return Markdown("\n".join(lines))


class MarkdownText(str):
    """A string that Jupyter displays as Markdown (``_repr_markdown_``), so a cell ending in it
    shows rendered text in the book rather than a quoted Python string. It is still a ``str``:
    ``f"{line}"``, ``glue(...)`` and comparisons work as usual."""

    def _repr_markdown_(self) -> str:
        return str(self)


def preset_of(result) -> tuple[str, list[str]]:
    """``("paper" | "smoke" | "custom", differences)``: which preset a result's config is, and
    the fields (``name=value``) in which it differs from the nearest preset."""
    import dataclasses

    try:
        from ntkbook.experiments import make_config

        presets = {s: dataclasses.asdict(make_config(result.name, s)) for s in ("paper", "smoke")}
    except Exception:  # an experiment that is not registered: no preset to compare with
        return "unknown", []
    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in result.config.items()}

    def diff(preset):
        return [k for k in preset if k in cfg and _plain(preset[k]) != _plain(cfg[k])]

    best = min(presets, key=lambda s: (len(diff(presets[s])), s != "paper"))
    d = diff(presets[best])
    return best, [f"{k}={_plain(cfg[k])}" for k in d]


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def device_label(prov: dict) -> str:
    dev = str(prov.get("device") or "unknown device")
    return "CPU" if dev.lower() == "cpu" else dev


def source_code(*objects) -> MarkdownText:
    """The source of library functions, classes or modules as one fenced Python block (Markdown),
    in the order given, separated by a blank line: what a chapter shows of code it imports, e.g. in
    a dropdown, ``glue("src", source_code(mlp.init, mlp.apply), display=False)`` and
    ``{glue:md}`` (the text is the code itself, read with :func:`inspect.getsource`)."""
    import inspect
    import textwrap

    body = "\n\n".join(textwrap.dedent(inspect.getsource(obj)).rstrip() for obj in objects)
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", body)), default=0))
    return MarkdownText(f"{fence}python\n{body}\n{fence}")


def provenance_line(result, *more) -> MarkdownText:
    """One sentence saying where the numbers of ``result`` (and of ``more`` results) come from:
    scale (paper or smoke preset, or which fields were changed), date, device, git commit (and
    whether the tree had uncommitted changes), wall time, and whether the numbers still come from
    today's code (:func:`ntkbook.freshness.freshness`; a result computed by earlier code says so,
    with the date it was last re-verified). Chapters show it under their title::

        provenance_line(res)   # "Numbers from `modular_mlp` at paper scale, computed on
                               #  2026-11-30 on NVIDIA H200 at commit 4420048 in 2m54s
                               #  (today's code)."
    """
    from ntkbook.freshness import freshness
    from ntkbook.progress import format_seconds

    parts, notes = [], []
    for r in (result, *more):
        prov = r.provenance or {}
        scale, changed = preset_of(r)
        what = f"`{r.name}` at {scale} scale" if scale in ("paper", "smoke") else f"`{r.name}`"
        if changed:
            shown = ", ".join(changed[:4]) + (", ..." if len(changed) > 4 else "")
            what += f" with {shown}"
        date = str(prov.get("date") or "")[:10] or "an unknown date"
        commit = prov.get("git_commit")
        at = f"commit {commit[:7]}" if commit else "an unrecorded commit"
        if prov.get("git_dirty"):
            at += " plus uncommitted changes"
        wall = prov.get("wall_time_s")
        took = f" in {format_seconds(float(wall))}" if wall is not None else ""
        resumed = prov.get("resumed_points")
        res_txt = f" ({resumed} points resumed from an earlier run)" if resumed else ""
        fresh = freshness(r)
        parts.append(f"{what}, computed on {date} on {device_label(prov)} at {at}{took}{res_txt} "
                     f"({fresh.short()})")
        if not fresh.today or fresh.env_changes:
            notes.append(f"`{r.name}`: {fresh.sentence()}")
    text = "**Provenance.** Numbers from " + "; ".join(parts) + "."
    if notes:
        text += " " + " ".join(dict.fromkeys(notes))
    return MarkdownText(text)


def about_these_numbers(result, *more) -> MarkdownText:
    """The collapsible "About these numbers" box under a chapter's title: its
    :func:`provenance_line` (scale, date, device, commit, wall time, whether the numbers still come
    from today's code), folded so that the page opens with the finding, not the machinery."""
    line = str(provenance_line(result, *more)).removeprefix("**Provenance.** ")
    return MarkdownText("\n".join([
        "```{admonition} About these numbers", ":class: dropdown about-these-numbers", "",
        line, "", "Every number on this page is computed by the library from these stored results "
        "when the page is built; {doc}`scorecard` sets them beside the papers'.", "```"]))


def opening(chapter: str, results: Sequence = (), data: Sequence[str] = (), *,
            notes: Sequence[str] = ()) -> MarkdownText:
    """What a chapter shows after its "In this chapter" summary: the :func:`run_this_chapter` box,
    then, for a chapter that loads results, :func:`about_these_numbers` (collapsed). One cell,
    input removed, renders both::

        opening("modular_mlp", [res], data=["MNIST"])
    """
    parts = [run_this_chapter(chapter, results, data, notes=notes)]
    if results:
        parts.append(about_these_numbers(*results))
    return MarkdownText("\n\n".join(parts))


def chapter_knobs(chapter: str, repo=None) -> list[str]:
    """The names the parameters cell of ``book/<chapter>.md`` sets (``scale`` first), read from
    the chapter's source: the knobs a reader can turn when running it as a notebook."""
    import ast
    from pathlib import Path

    from ntkbook.paths import repo_root

    path = Path(repo or repo_root()) / "book" / f"{chapter}.md"
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^```\{code-cell\}[^\n]*\n:tags: \[[^\]]*\bparameters\b[^\]]*\]\n(.*?)^```$",
                  text, re.M | re.S)
    if not m:
        return []
    names = []
    for node in ast.parse(m.group(1)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in names]
    return names


def _chapter_times(chapter: str, times_file=None) -> dict[str, float]:
    """Measured wall times (s) of executing ``book/<chapter>.md`` per scale, from
    ``results/chapters.json`` (written by ``python -m ntkbook.book.build --record-times``)."""
    import json
    from pathlib import Path

    from ntkbook.paths import repo_root

    path = Path(times_file) if times_file else repo_root() / "results" / "chapters.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    key = f"book/{chapter}.md"
    return {scale: entry[key] for scale, entry in data.items()
            if isinstance(entry, dict) and key in entry and "seconds" in entry[key]}


def run_this_chapter(chapter: str, results: Sequence = (), data: Sequence[str] = (),
                     *, notes: Sequence[str] = (), times_file=None) -> MarkdownText:
    """The "Run this chapter" box shown at the top of a chapter: the one command, the data it
    needs, and its time at smoke and paper scale. The times are measured, never typed: the
    execution times come from ``results/chapters.json`` and the compute time of the paper-scale
    results from their provenance (``results`` are the chapter's paper-scale results; pass none
    for a chapter that computes nothing heavy).

    The knobs are the names the chapter's parameters cell sets (:func:`chapter_knobs`): the page
    does not show that cell, the box names what it holds.

    Args:
      chapter: the chapter's file name without ``book/`` and ``.md``, e.g. ``"modular_mlp"``.
      results: the :class:`~ntkbook.store.Result` objects the chapter loads (any scale; only
        stored paper-scale ones say how long the paper numbers took to compute).
      data: the data sets it reads (e.g. ``["MNIST"]``); empty for none.
      notes: further lines for the box (Markdown), e.g. a faster route to the paper-scale numbers.
    """
    from ntkbook.freshness import latest_whole_rerun
    from ntkbook.progress import format_seconds

    times = _chapter_times(chapter, times_file)
    knobs = chapter_knobs(chapter)
    knob_text = (" The parameters cell at the top of the notebook sets "
                 + ", ".join(f"`{k}`" for k in knobs) + ".") if knobs else ""
    lines = ["```{admonition} Run this chapter", ":class: tip run-this-chapter", "",
             f"- **Command** (from the repository root): `make chapter CH={chapter} SCALE=smoke` "
             f"computes this page's experiments at smoke scale; `make chapter CH={chapter}` at paper "
             f"scale (stored results). Or open it as a notebook: `make lab CH={chapter}` "
             f"(JupyterLab with jupytext).{knob_text}"]
    if data:
        lines.append(f"- **Data**: {', '.join(data)}, read from the folder named by `NTKBOOK_DATA`; "
                     f"`make data CH={chapter}` fetches and checks it (routes and checksums: "
                     f"`python -m ntkbook data list`).")
    else:
        lines.append("- **Data**: none (the inputs are generated by the code).")
    t = []
    for scale, what in (("smoke", "smoke scale"), ("paper", "paper scale, with the stored results")):
        if scale in times:
            cpus = times[scale].get("cpus")
            on = f" on {cpus} CPU cores" if cpus else ""
            t.append(f"{what} {format_seconds(float(times[scale]['seconds']))}{on}")
    computed = []
    for r in results:
        scale, changed = preset_of(r)
        wall = (r.provenance or {}).get("wall_time_s")
        if scale == "paper" and not changed and wall is not None:
            took = f"`{r.name}` {format_seconds(float(wall))} on {device_label(r.provenance)}"
            v = latest_whole_rerun(r)
            if v is not None:  # what the entry costs with later code
                took += (f" (rerun whole in {format_seconds(float(v['wall_time_s']))} on "
                         f"{device_label(v.get('provenance') or {})}, {str(v.get('date'))[:10]})")
            computed.append(took)
    time_line = "- **Time** to execute: " + ("; ".join(t) if t else "not measured yet") + "."
    if computed:
        time_line += " Recomputing the paper-scale results took " + ", ".join(computed) + "."
    lines.append(time_line)
    lines += [f"- {n}" for n in notes]
    lines.append("```")
    return MarkdownText("\n".join(lines))
