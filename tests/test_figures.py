"""The book's figures as a reader sees them: ``show`` renders a 2x PNG that carries its smallest
font size and dpi; every figure of every chapter, drawn from the stored paper-scale results, keeps
its text at 9 CSS px or more at a desktop's and at a phone's column width, with no overlapping
texts; untrained models are marked; and a glued figure reaches the built HTML at half its
pixel width, with its metadata, as a link to the full-size image."""

from __future__ import annotations

import base64
import re
import struct
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook import plotting  # noqa: E402
from ntkbook.book import report  # noqa: E402


def _png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])


def _toy_figure():
    fig, (a, b, hidden) = plt.subplots(1, 3, figsize=(6, 3))
    a.plot([1, 2, 3], label="line")
    a.set_title("title", fontsize=14)
    a.set_xlabel("x", fontsize=12)
    a.tick_params(labelsize=10.5)  # the smallest text: tick labels, which get their text when drawn
    a.legend(fontsize=11)
    b.text(0.5, 0.5, "note", fontsize=13)
    b.tick_params(labelsize=11)
    b.text(0.1, 0.1, "invisible", fontsize=3).set_visible(False)
    b.text(0.1, 0.9, "", fontsize=2)  # empty: nothing to read
    hidden.set_title("hidden axes", fontsize=4)
    hidden.set_visible(False)
    fig.text(0.01, 0.01, "figure note", fontsize=11)
    return fig


def test_show_renders_a_2x_png_with_its_smallest_font_and_dpi():
    fig = _toy_figure()
    img = report.show(fig)
    png = img.data
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    meta = plotting.png_text(png)
    # the smallest visible, non-empty text: the first panel's tick labels (10.5 pt); the invisible
    # text, the empty one and the hidden axes' title do not count
    assert float(meta[report.PNG_MIN_FONT_KEY]) == 10.5
    assert int(meta[report.PNG_DPI_KEY]) == report.FIGURE_DPI == plotting.DPI
    # rendered at FIGURE_DPI (the pHYs chunk: pixels per metre) and displayed at half its pixel width
    i = png.index(b"pHYs")
    per_metre, _, unit = struct.unpack(">IIB", png[i + 4:i + 13])
    assert unit == 1 and per_metre == round(report.FIGURE_DPI / 0.0254)
    width, height = _png_size(png)
    assert img.width == width // 2 and img.height is None  # the height follows the width
    assert fig.number not in plt.get_fignums(), "show() leaves the figure open"   # others' figures aside


def test_what_glue_stores_is_the_png_with_its_display_width():
    """``glue(name, show(fig))`` stores IPython's display data of the Image: the PNG bytes (with
    their metadata) and a width of half the pixel width, which myst-nb writes onto the <img>."""
    from IPython.core.formatters import format_display_data

    img = report.show(_toy_figure())
    bundle, metadata = format_display_data(img)
    png = base64.b64decode(bundle["image/png"]) if isinstance(bundle["image/png"], str) else bundle["image/png"]
    assert png == img.data
    assert float(plotting.png_text(png)[report.PNG_MIN_FONT_KEY]) == 10.5
    assert metadata["image/png"] == {"width": _png_size(png)[0] // 2}


def test_min_font_rules_agree_and_displayed_size_follows_the_column():
    fig = _toy_figure()
    assert plotting.min_font_pt(fig) == report.min_font_pt(fig) == 10.5
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot([1, 2])
    ax.tick_params(labelsize=10.5)
    png = report.show(fig).data
    px = plotting.displayed_font_px(png)
    width = _png_size(png)[0]
    for name, column in plotting.COLUMN_PX.items():
        shown = min(width / 2, column)
        assert px[name] == pytest.approx(10.5 * plotting.DPI / 72 * shown / width)
    # an 8 in figure is 800 CSS px: at 10.5 pt it is too small on a phone's 340 px column
    assert px["phone"] < plotting.MIN_FONT_PX <= px["desktop"]


def test_font_size_for_keeps_text_readable_on_a_phone():
    for width in (4.0, 5.5, 6.4, 8.0):
        fig, ax = plotting.new_figure(1, width=width, height=2.5)
        ax.plot([1, 10, 100])
        ax.set_title("a title")
        assert plotting.display_font_px(fig) >= plotting.MIN_FONT_PX, width
        plt.close(fig)


def test_compact_tick_labels():
    assert [plotting.compact_number(v) for v in (16, 256, 1024, 4096, 16384, 0.5, 2 ** 20)] == \
        ["16", "256", "1k", "4k", "16k", "0.5", "1M"]
    from ntkbook.plotting.attention import _spread_out

    assert _spread_out([16, 64, 256, 1024, 4096, 8192, 16384]) == [16, 256, 4096, 16384]
    assert _spread_out([16, 64, 256, 1024, 4096, 8192]) == [16, 256, 8192]
    assert _spread_out([16, 64, 256, 1024]) == [16, 256, 1024]


# ---- every figure of the book, from the stored paper-scale results ------------------------------

def _load(name, alternatives=(), **overrides):
    """A stored paper-scale result (never computed here: a missing one fails with the command)."""
    from ntkbook.experiments import load_stored

    return load_stored(name, "paper", alternatives, **overrides)


def _gemma_figures():
    from ntkbook.claims import gemma as claims
    from ntkbook.experiments import gemma_probe
    from ntkbook.plotting import gemma

    # read, never computed here: the paper-scale run takes an hour
    res = claims.stored("gemma_probe", "paper")
    assert res is not None, "the paper-scale gemma_probe result is not stored: python -m ntkbook run gemma_probe"
    layer = claims.main_layer(res)
    p = gemma_probe.point(res, layer)
    rows = p["pos"]
    best = sorted(rows, key=lambda r: -r["entk_ap"])
    a = best[0]
    b = next((r for r in best[1:] if r["entk_mode"] != a["entk_mode"]), best[1])
    if b["pca_mode"] == a["pca_mode"]:
        n_pcs = len(res[gemma_probe.point_key(layer, "down_proj", "pca_variance")])
        b_pc = next(i for i in range(n_pcs) if i != a["pca_mode"])
    else:
        b_pc = b["pca_mode"]
    # the depth sweep as the chapter reads it: the stored layers, and the first data set's beside them
    sweep = claims.probe_sweep(32)
    depth = claims.depth_rows(sweep, "disjoint windows")
    if len(sweep) < claims.N_LAYERS:
        depth += claims.depth_rows(claims.first_sweep(32), "first data set")
    title = f"layer {layer}, N = {res['N']}, {res.config['n_splits']} splits by story"
    return {
        "spectrum": lambda: gemma.plot_spectrum(res, claims.ritz_convergence(res, layer), layer,
                                                pinned_ratio=claims.PINNED_RATIO),
        "pos": lambda: gemma.plot_split_differences(claims.split_table(p, "pos"), f"Parts of speech, {title}",
                                                    claims.WIN_SHARE),
        "morph": lambda: gemma.plot_split_differences(claims.split_table(p, "morph"),
                                                      f"Morphological features, layer {layer}, N = {res['N']}",
                                                      claims.WIN_SHARE),
        "scatter": lambda: gemma.plot_mode_scatter(res, layer, modes=(a["entk_mode"], b["entk_mode"]),
                                                   pcs=(a["pca_mode"], b_pc)),
        "depth": lambda: gemma.plot_depth(depth, hollow=("first data set",),
                                          floor=claims.depth_floor(claims.controls_sweep(32))),
    }


def _chapter_figures(chapter: str) -> dict:
    """name -> a function drawing that figure of ``chapter``, as the chapter calls it."""
    from ntkbook.plotting import attention, entk, influence, intro, modular, transformer

    if chapter == "intro":
        from ntkbook import data

        x, _ = data.class_subset(data.load_mnist(), [3, 8], 100, seed=0)
        g = x @ x.T
        return {"overview": lambda: intro.plot_overview(np.linalg.eigvalsh(g), np.linalg.eigvalsh(g @ g @ g),
                                                        _load("demo_sweep"))}
    if chapter == "entk_lanczos":
        return {"ghosts": lambda: entk.plot_lanczos_ghosts(_load("lanczos_ghosts")),
                "convergence": lambda: entk.plot_entk_convergence(_load("entk_convergence"))}
    if chapter == "modular_mlp":
        mm = _load("modular_mlp")
        return {"grokking": lambda: modular.plot_grokking(mm), "spectra": lambda: modular.plot_spectra(mm),
                "eigvecs final": lambda: modular.plot_eigenvectors(mm, "final"),
                "eigvecs init": lambda: modular.plot_eigenvectors(mm, "init"),
                "dynamics": lambda: modular.plot_dynamics(mm), "crosscheck": lambda: modular.plot_crosscheck(mm)}
    if chapter == "modular_transformer":
        tf = _load("modular_transformer")
        return {n: (lambda n=n: getattr(transformer, f"plot_{n}")(tf))
                for n in ("training", "key_power", "spectra", "content", "eigenvectors", "dynamics", "lanczos")}
    if chapter == "attention_width":
        gram, dist, fb = _load("gram_conditioning"), _load("ntk_distance"), _load("ntk_distance_fullbatch")
        return {"gram spectra": lambda: attention.plot_gram_spectra(gram),
                "ridge": lambda: attention.plot_ridge(gram), "cone": lambda: attention.plot_cone(dist),
                "adam distance": lambda: attention.plot_adam_distance(dist),
                "fullbatch": lambda: attention.plot_fullbatch_distance(fb, dist),
                "lr scaling": lambda: attention.plot_lr_scaling(dist),
                "gd distance": lambda: attention.plot_ntk_distance(dist),
                "gd relative": lambda: attention.plot_ntk_distance(dist, relative=True),
                "gd time": lambda: attention.plot_distance_vs_time(dist, dist.config["tasks"][0]),
                "kernel movement": lambda: attention.plot_kernel_movement(dist)}
    if chapter == "influence":
        from ntkbook.claims import influence as claims_influence
        from ntkbook.plotting import influence_advtrain, influence_map, influence_sharpness

        res, wid, adv = _load("influence_malleability"), _load("influence_width"), _load("influence_advtrain")
        imp = _load("influence_map")
        shp = _load("influence_sharpness")
        cfg = res.config
        return {"map": lambda: influence_map.plot_flip_vs_eps(imp, "lam=0.001", paper=claims_influence.PAPER),
                "map n lambda": lambda: influence_map.plot_flip_vs_eps(imp, "nlam=0.001", paper=claims_influence.PAPER),
                "scatter": lambda: influence.plot_influence_scatter(res, cfg["tasks"][0]),
                "width": lambda: influence.plot_width(wid),
                "adv": lambda: influence_advtrain.plot_flip_vs_eps(adv),
                "sharpness": lambda: influence_sharpness.plot_sharpness(shp)}
    if chapter == "gemma":
        return _gemma_figures()
    raise KeyError(chapter)


CHAPTERS = ("intro", "entk_lanczos", "modular_mlp", "modular_transformer", "attention_width", "influence", "gemma")


def _overlapping_texts(fig) -> list[str]:
    """Pairs of texts a reader sees (titles, labels, tick labels within the axes' limits, legends,
    annotations) whose drawn boxes overlap by more than a pixel each way."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    tick_labels, in_view = set(), set()
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = min(limits), max(limits)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                for label in (tick.label1, tick.label2):
                    tick_labels.add(id(label))
                    if lo - 1e-9 * (hi - lo) <= tick.get_loc() <= hi + 1e-9 * (hi - lo):
                        in_view.add(id(label))
    texts = [(t.get_text(), t.get_window_extent(renderer)) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())
             and (id(t) not in tick_labels or id(t) in in_view)]
    found = []
    for i, (t1, b1) in enumerate(texts):
        for t2, b2 in texts[i + 1:]:
            if min(b1.x1, b2.x1) - max(b1.x0, b2.x0) > 1 and min(b1.y1, b2.y1) - max(b1.y0, b2.y0) > 1:
                found.append(f"{t1!r} / {t2!r}")
    return found


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_figure_reads_on_a_phone_and_on_a_desktop(chapter):
    """Each figure's smallest text is at least MIN_FONT_PX CSS px as displayed in a desktop's and
    in a phone's column (computed from the PNG ``show`` renders), and no two of its texts overlap
    (tick labels such as "256 10244096k16k", titles, legends, annotations)."""
    problems = {}
    for name, draw in _chapter_figures(chapter).items():
        fig = draw()
        overlaps = _overlapping_texts(fig)
        px = plotting.displayed_font_px(report.show(fig).data)
        small = {k: round(v, 1) for k, v in px.items() if v < plotting.MIN_FONT_PX}
        if small or overlaps:
            problems[name] = {"px": small, "overlapping texts": overlaps}
    assert not problems, f"{chapter}: {problems}"


def test_untrained_models_are_marked():
    """Fig. 4.2 (the map): every model that did not train is drawn dashed with hollow markers, the
    others solid, and the legend says what that means."""
    from ntkbook.influence import readout
    from ntkbook.plotting import influence_map

    imp = _load("influence_map")
    untrained = [(t, m) for t in imp.config["tasks"] for m in ("relu", "attn") if not readout.trained(imp, t, m)]
    assert untrained  # the stored map has some (MLP-Attn on Fashion-MNIST): the marking is exercised
    fig = influence_map.plot_flip_vs_eps(imp, "lam=0.001")
    dashed = [line for ax in fig.axes for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == len(untrained)
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    labels += [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "not trained" in labels
    plt.close(fig)


def test_distance_vs_time_legend_names_every_width_drawn():
    """Fig. 3.9: one legend entry per width drawn in either panel, in the colour of its lines."""
    from ntkbook.plotting import attention

    dist = _load("ntk_distance")
    fig = attention.plot_distance_vs_time(dist, dist.config["tasks"][0])
    drawn = {tuple(line.get_color()) if not isinstance(line.get_color(), str) else line.get_color()
             for ax in fig.axes for line in ax.get_lines()}
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert len(labels) == len(drawn) == len(dist["widths"])
    plt.close(fig)


# ---- the contract with the built HTML -----------------------------------------------------------

def test_glued_figure_reaches_the_html_at_half_width_as_a_link(tmp_path):
    """A notebook whose figure is glued from ``show`` and placed with ``{glue:figure}``, built by
    Sphinx with myst-nb (as the book is): the <img> has half the PNG's pixel width, sits in a link
    to the full-size image, and the image file keeps the metadata."""
    import nbformat
    from IPython.core.formatters import format_display_data

    img = report.show(_toy_figure())
    bundle, metadata = format_display_data(img)
    prefix = "application/papermill.record/"
    metadata["scrapbook"] = {"name": "fig-toy", "mime_prefix": prefix}
    out = nbformat.v4.new_output("display_data", data={prefix + k: v for k, v in bundle.items()},
                                 metadata=metadata)
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# Toy"), nbformat.v4.new_code_cell("glue(...)", outputs=[out]),
               nbformat.v4.new_markdown_cell("```{glue:figure} fig-toy\n:name: fig-toy\n:alt: a toy\n\n"
                                             "What to see: nothing.\n```")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(nb, src / "index.ipynb")
    (src / "conf.py").write_text('extensions = ["myst_nb"]\nnb_execution_mode = "off"\n')
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    html = (tmp_path / "html" / "index.html").read_text()
    m = re.search(r'<a class="[^"]*image-reference[^"]*" href="([^"]+\.png)"><img[^>]*?src="([^"]+\.png)"[^>]*>', html)
    assert m, "the figure's image is not wrapped in a link to itself"
    assert m.group(1) == m.group(2)
    tag = m.group(0)
    width = _png_size(img.data)[0] // 2
    assert re.search(rf'width="{width}(px)?"|width:\s*{width}(\.0)?px', tag), tag
    assert "height" not in tag, f"a fixed height squashes the image in a narrow column: {tag}"
    png = (tmp_path / "html" / m.group(2)).read_bytes()
    assert png == img.data
    assert float(plotting.png_text(png)[report.PNG_MIN_FONT_KEY]) == 10.5
