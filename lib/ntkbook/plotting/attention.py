"""Figures of the linear-attention chapter (Paper A): Gram spectra, ridges, the input cone, NTK
distances, kernel movement. Each function takes a :class:`~ntkbook.store.Result` and returns the
Figure, laid out for a phone's column as well as a desktop's (at most two panels side by side)."""

from __future__ import annotations

import numpy as np

from ntkbook.experiments import ntk_distance, ntk_distance_fullbatch
from ntkbook.lazy.distance import MODELS, TRAINED_ACC, TRAINED_MSE
from ntkbook.plotting import PALETTE, WIDTH, legend_in, log_ticks, new_figure, panels
from ntkbook.stats import mean_spread
from ntkbook.store import Result

MODEL_STYLE = {"relu": dict(color=PALETTE[0], marker="o"), "attn": dict(color=PALETTE[1], marker="s")}


def _short_task(name: str) -> str:
    """A task's display name short enough for a panel title on a phone."""
    return (name.replace(" automobile vs airplane", " auto/plane").replace(" shirt vs T-shirt/top", " shirt/T-shirt")
            .replace(" (JPEG q75 subset)", ""))


def _spread_out(values, octaves: float = 3.0) -> list:
    """Values of a log axis far enough apart to be labelled without overlap: from the smallest,
    each at least ``octaves`` doublings above the previous one; the largest always, replacing the
    previous label if it is less than half that far."""
    vals = sorted(float(v) for v in values)
    kept = [vals[0]]
    for v in vals[1:]:
        if np.log2(v / kept[-1]) >= octaves:
            kept.append(v)
    if kept[-1] != vals[-1]:
        if np.log2(vals[-1] / kept[-1]) >= octaves / 2 or len(kept) == 1:
            kept.append(vals[-1])
        else:
            kept[-1] = vals[-1]
    return kept


def _readable_log_y(ax) -> None:
    """On a log y axis spanning less than two decades, label 1-2-5 steps too, so that there are
    several labelled ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 100:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def plot_gram_spectra(result: Result):
    """Normalised eigenvalues of G, of G~ = G^3 (measured from the attention output and as the cube
    of G's), of G~ by a naive eigh, and of the row-normalised attention Gram, per data set."""
    names = result["datasets"]
    fig, axes, spare = panels(len(names), row_height=2.8, spare=True, sharey=True)
    for ax, name in zip(axes, names):
        s = result["per_dataset"][name]
        lam = result[f"{name}/lam_G"]
        lam_t = result[f"{name}/lam_Gt"]
        naive = result[f"{name}/lam_Gt_naive"]
        lam_h = result[f"{name}/lam_Ghat"]
        r, rt, rh = s["rank_G"], s["rank_Gt"], s["rank_Ghat"]
        k = np.arange(1, lam.size + 1)
        ax.semilogy(k[:r], lam[:r] / lam[0], color=PALETTE[0], lw=1.5, label=r"$G = XX^\top$")
        ax.semilogy(k[:r], (lam[:r] / lam[0]) ** 3, color="k", lw=3, alpha=0.3, label=r"$\lambda(G)^3$")
        ax.semilogy(k[:rt], lam_t[:rt] / lam_t[0], color=PALETTE[1], lw=1.2, ls="--",
                    label=r"$\tilde G$ (SVD of $XX^\top X$)")
        kn = np.arange(1, naive.size + 1)
        ax.semilogy(kn, np.abs(naive) / naive[0], color="0.45", lw=1, ls=":", label=r"$|\lambda|$ of $\tilde G$ by eigh")
        ax.semilogy(k[:rh], lam_h[:rh] / lam_h[0], color=PALETTE[2], lw=1.2, label=r"$\hat G$ (row-normalised)")
        ax.set_title(_short_task(result["labels"][name]))
        ax.set_xlabel("index $k$")
        ax.tick_params(labelleft=True)
    for ax in axes[::2]:
        ax.set_ylabel(r"$\lambda_k / \lambda_1$")
    handles, labels = axes[0].get_legend_handles_labels()
    legend_in(spare, fig, handles, labels, ncol=1)
    return fig


def plot_ridge(result: Result):
    """Condition number with a ridge ``r * lambda_max`` versus ``r``: G, G~, G^ and kappa_r(G)^3.
    The legend sits below the panels, so it hides no curve."""
    names = result["datasets"]
    ridges = result["rel_ridges"]
    fig, axes, spare = panels(len(names), row_height=2.8, spare=True, sharey=True)
    for ax, name in zip(axes, names):
        g, gt, gh = (result[f"{name}/{k}"] for k in ("ridge_G", "ridge_Gt", "ridge_Ghat"))
        ax.loglog(ridges, g**3, "-", lw=4, alpha=0.3, color="k", label=r"$\kappa(G + r\lambda_1 I)^3$")
        ax.loglog(ridges, g, "o-", ms=4, color=PALETTE[0], label=r"$\kappa(G + r\lambda_1 I)$")
        ax.loglog(ridges, gt, "s--", ms=5, mfc="none", color=PALETTE[1], label=r"$\kappa(\tilde G + r\tilde\lambda_1 I)$")
        ax.loglog(ridges, gh, "^:", ms=4, color=PALETTE[2], label=r"$\kappa(\hat G + r\hat\lambda_1 I)$")
        ax.loglog(ridges, 1 + 1 / ridges, "-", color="0.5", lw=1, label=r"$1 + 1/r$ (cap)")
        ax.set_title(_short_task(result["labels"][name]))
        ax.set_xlabel("relative ridge $r$")
        ax.tick_params(labelleft=True)
    for ax in axes[::2]:
        ax.set_ylabel("condition number")
    handles, labels = axes[0].get_legend_handles_labels()
    legend_in(spare, fig, handles, labels, ncol=1)
    return fig


def _width_axis(ax, widths, ylog: bool = True):
    """A log width axis labelled at widths far enough apart not to overlap (:func:`_spread_out`),
    with a small unlabelled tick at every measured width; a log y axis with ``ylog``."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
    log_ticks(ax.xaxis, _spread_out(widths))
    ax.xaxis.set_minor_locator(FixedLocator([float(w) for w in widths]))
    ax.set_xlabel("width $m$")


def plot_ntk_distance(result: Result, key: str = "dist_test_T", *, relative: bool = False, ylabel=None):
    """GD line: ``||f_m - f_NTK||`` versus width, log-log, one panel per task, mean +- sample
    standard deviation over seeds, with a ``1/sqrt(m)`` reference line."""
    tasks = list(result.config["tasks"])
    fig, axes, spare = panels(len(tasks), row_height=2.8, spare=True)
    for ax, task in zip(axes, tasks):
        for model in result.config["models"]:
            widths, v = ntk_distance.point_values(result, task, model, key)
            if relative:
                v = v / result[f"{task}/{model}/ntk_rms"][-2]
            mu, sd = mean_spread(v, axis=1)
            ax.errorbar(widths, mu, yerr=sd, capsize=3, lw=1.3, ms=4, label=result["models"][model],
                        **MODEL_STYLE[model])
            ax.plot(widths, mu[0] * np.sqrt(widths[0] / widths), ls=":", lw=1, color=MODEL_STYLE[model]["color"])
        _width_axis(ax, result["widths"])
        _readable_log_y(ax)
        ax.set_title(_short_task(result["tasks"][task]))
    for ax in axes[::2]:
        ax.set_ylabel(ylabel or (r"distance / RMS$(f_{NTK})$" if relative else r"$\|f_m - f_{NTK}\|$ (RMS)"))
    axes[0].plot([], [], "k:", lw=1, label=r"$\propto 1/\sqrt{m}$ from $m = 16$")
    handles, labels = axes[0].get_legend_handles_labels()
    legend_in(spare, fig, handles, labels, ncol=1)
    return fig


def plot_adam_distance(result: Result, rule: str = "constant"):
    """Adam line: top row, the distance between each network and its own linearisation (solid) and
    to the converged kernel regression (dashed); bottom row, the networks' training MSE, with the
    MSE threshold of "trained". Hollow markers: networks that did not train (by MSE and training
    accuracy, :func:`ntkbook.lazy.distance.trained`). Error bars: sample standard deviation over
    seeds."""
    tasks = list(result.config["adam_tasks"])
    fig, axes = new_figure(len(tasks), 2, height=5.6, sharex="col")
    axes = np.asarray(axes).reshape(2, len(tasks))
    for j, task in enumerate(tasks):
        top, bot = axes[0, j], axes[1, j]
        for model in result.config["models"]:
            st = MODEL_STYLE[model]
            widths, d = ntk_distance.point_values(result, task, model, "dist_net_lin", line="adam", rule=rule)
            _, dn = ntk_distance.point_values(result, task, model, "dist_net_ntk", line="adam", rule=rule)
            _, mse = ntk_distance.point_values(result, task, model, "train_mse_net", line="adam", rule=rule)
            _, acc = ntk_distance.point_values(result, task, model, "acc_train_net", line="adam", rule=rule)
            ok = (mse.mean(axis=1) <= TRAINED_MSE) & (acc.mean(axis=1) >= TRAINED_ACC)
            mu, sd = mean_spread(d, axis=1)
            top.plot(widths, mu, "-", color=st["color"], lw=1.5, label=f"{result['models'][model]}: net vs own linearisation")
            top.errorbar(widths, mu, yerr=sd, fmt="none", ecolor=st["color"], capsize=3)
            top.plot(widths[ok], mu[ok], ls="none", ms=6, **st)
            top.plot(widths[~ok], mu[~ok], ls="none", ms=6, mfc="white", **st)
            top.plot(widths, dn.mean(axis=1), "--", color=st["color"], lw=1.2,
                     label=f"{result['models'][model]}: net vs $f_{{NTK,\\infty}}$")
            bot.plot(widths, mse.mean(axis=1), "-", color=st["color"], lw=1.5)
            bot.plot(widths[ok], mse.mean(axis=1)[ok], ls="none", ms=6, **st)
            bot.plot(widths[~ok], mse.mean(axis=1)[~ok], ls="none", ms=6, mfc="white", **st)
        bot.axhline(TRAINED_MSE, color="0.4", ls=":", lw=1)
        top.set_yscale("symlog", linthresh=1e-3)
        top.set_ylim(bottom=0)
        top.set_title(_short_task(result["tasks"][task]))
        _width_axis(bot, widths, ylog=False)
        bot.set_ylim(0, 1.1)
    axes[0, 0].set_ylabel("distance (RMS over test)")
    axes[1, 0].set_ylabel("training MSE")
    from matplotlib.lines import Line2D

    handles, labels = axes[0, 0].get_legend_handles_labels()
    handles += [Line2D([], [], ls="none", marker="o", mfc="white", color="0.3"), Line2D([], [], ls=":", color="0.4")]
    labels += ["hollow marker: did not train", "training-MSE criterion"]
    fig.legend(handles, labels, loc="outside lower center", ncol=1)
    return fig


def plot_lr_scaling(result: Result):
    """Net-vs-linearisation distance with Adam's lr constant (solid) and scaled as 1/sqrt(m)
    (dashed), per task; mean +- sample standard deviation over seeds."""
    tasks = [t for t in result.config["adam_tasks"] if t in result.config["scaled_lr_tasks"]]
    rules = list(result.config["lr_rules"])
    fig, axes, _ = panels(len(tasks), width=4.2 if len(tasks) < 2 else WIDTH, row_height=3.0)
    for ax, task in zip(axes, tasks):
        drawn = set()
        for model in result.config["models"]:
            st = MODEL_STYLE[model]
            for rule, ls, mfc in zip(rules, ("-", "--"), (st["color"], "white")):
                widths, d = ntk_distance.point_values(result, task, model, "dist_net_lin", line="adam", rule=rule)
                drawn.update(int(w) for w in widths)
                mu, sd = mean_spread(d, axis=1)
                ax.errorbar(widths, mu, yerr=sd, ls=ls, capsize=3, lw=1.3, ms=5,
                            mfc=mfc, color=st["color"], marker=st["marker"],
                            label=f"{result['models'][model]}, {result['lr_rules'][rule]}")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_ylim(bottom=0)
        _width_axis(ax, sorted(drawn), ylog=False)
        ax.set_title(_short_task(result["tasks"][task]))
    axes[0].set_ylabel("net vs own linearisation")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=1)
    return fig


def plot_cone(result: Result):
    """(a) distribution of the pairwise angles between the inputs each network sees (raw pixels,
    row-normalised, vs the row-normalised attention output), per task; (b) the fraction of random
    ReLU hyperplanes that cut the data, and the expected number of independent neurons that do at
    the smallest and largest Adam width."""
    tasks = list(result.config["tasks"])
    fig, (a, b) = new_figure(2, 1, height=3.2)
    q = np.linspace(0, 1, 101)
    styles = ("-", "--", ":")
    for task, ls in zip(tasks, styles):
        for model in result.config["models"]:
            ang = result[f"{task}/{model}/angle_quantiles"]
            a.plot(np.maximum(ang, 1e-6), q, ls=ls, color=MODEL_STYLE[model]["color"], lw=1.5,
                   label=f"{result['models'][model]}, {result['tasks'][task].split(' ')[0]}")
    a.set_xscale("log")
    a.set_xlabel("pairwise angle (rad)")
    a.set_ylabel("fraction of pairs below")
    a.set_title("(a) input angles")
    fig.legend(*a.get_legend_handles_labels(), loc="outside lower center", ncol=2)
    x = np.arange(len(tasks))
    for i, model in enumerate(result.config["models"]):
        frac = [result["table"][f"{t}/{model}"]["cone"]["cut_fraction"] for t in tasks]
        b.bar(x + (i - 0.5) * 0.38, frac, width=0.38, color=MODEL_STYLE[model]["color"], label=result["models"][model])
        for xi, f in zip(x, frac):
            b.text(xi + (i - 0.5) * 0.38, f + 0.02, f"{f:.0%}", ha="center", rotation=90, va="bottom")
    b.set_xticks(x)
    b.set_xticklabels([result["tasks"][t].split(" ")[0].replace("-", "-\n") for t in tasks])
    b.set_ylim(0, 1.5)
    b.set_yticks([0, 0.5, 1.0])
    b.set_ylabel("share cutting the data")
    b.set_title("(b) ReLU hyperplanes")
    return fig


def plot_kernel_movement(result: Result):
    """``||K_T - K_0||_F / ||K_0||_F`` versus width for GD (solid) and Adam (dashed, where the Adam
    line ran), with a ``1/sqrt(m)`` line; mean +- sample standard deviation over seeds. Widths at
    which the kernel did not move at all (no activation pattern changed) cannot be drawn on a log
    axis and are left out."""
    tasks = list(result.config["tasks"])
    fig, axes, spare = panels(len(tasks), row_height=2.8, spare=True, sharey=True)
    for ax, task in zip(axes, tasks):
        for model in result.config["models"]:
            st = MODEL_STYLE[model]
            lines = [("kernel_move_T", "gd", "-", st["color"], "GD")]
            if task in result.config["adam_tasks"]:
                lines.append(("kernel_move", "adam", "--", "white", "Adam"))
            for key, line, ls, mfc, name in lines:
                widths, v = ntk_distance.point_values(result, task, model, key, line=line)
                mu, sd = mean_spread(v, axis=1)
                ok = mu > 0
                ax.errorbar(widths[ok], mu[ok], yerr=sd[ok], capsize=3, lw=1.3, ms=5, ls=ls, mfc=mfc,
                            color=st["color"], marker=st["marker"], label=f"{result['models'][model]}, {name}")
        all_w = np.asarray(result["widths"])
        ax.loglog(all_w, 1.0 / np.sqrt(all_w), "k:", lw=1, label=r"$1/\sqrt{m}$")
        _width_axis(ax, all_w)
        ax.set_title(result["tasks"][task].split(" ")[0])
        ax.tick_params(labelleft=True)
    for ax in axes[::2]:
        ax.set_ylabel(r"$\|K_T - K_0\|_F / \|K_0\|_F$")
    handles, labels = axes[0].get_legend_handles_labels()
    legend_in(spare, fig, handles, labels, ncol=1)
    return fig


def plot_distance_vs_time(result: Result, task: str):
    """Relative distance to the NTK predictor along GD training, one line per width, both models;
    a width has the same colour in both panels, and the legend lists every width drawn in either."""
    widths = np.asarray(result["widths"])
    steps = np.asarray(result["snapshots"])
    models = list(result.config["models"])
    fig, axes, _ = panels(len(models), row_height=3.0, sharey=True)
    cmap = __import__("matplotlib").colormaps["viridis"]
    legend = {}
    for ax, model in zip(axes, models):
        rms = result[f"{task}/{model}/ntk_rms"][:-1]
        for i, m in enumerate(widths):
            if str(m) not in result["table"][f"{task}/{model}"]["points"]:
                continue  # this width was run for the other model only
            d = result[f"{task}/{model}/m={m}/dist_test"].mean(axis=0)
            ok = (steps > 0) & (rms > 0)
            (line,) = ax.loglog(steps[ok], d[ok] / rms[ok], "o-", ms=3, color=cmap(0.85 * i / max(len(widths) - 1, 1)))
            legend.setdefault(int(m), line)
        ax.set_title(f"{result['models'][model]}, {result['tasks'][task].split(' ')[0]}")
        ax.set_xlabel("GD step $k$")
        ax.tick_params(labelleft=True)
    for ax in axes:
        _readable_log_y(ax)
    axes[0].set_ylabel(r"distance / RMS$(f_{NTK})$")
    order = sorted(legend)
    fig.legend([legend[m] for m in order], [f"$m$ = {m}" for m in order], loc="outside lower center",
               ncol=4, columnspacing=1.0, handlelength=1.5)
    return fig


def plot_fullbatch_distance(result: Result, paper_recipe: Result | None = None):
    """Full-batch Adam line (:mod:`ntkbook.experiments.ntk_distance_fullbatch`): left, each
    network's distance to its own linearisation against width (mean and sample standard deviation
    over seeds; with
    ``paper_recipe``, the ``ntk_distance`` result, the same quantity under the paper's mini-batch
    recipe as thin dotted lines); right, the networks' training MSE with the "trained" threshold.
    Hollow markers: networks that did not train."""
    fig, (left, right) = new_figure(2, 1, height=3.2)
    models = result.config["models"]
    d = ntk_distance_fullbatch.table(result, "dist_net_lin")
    mse = ntk_distance_fullbatch.table(result, "train_mse_net")
    acc = ntk_distance_fullbatch.table(result, "acc_train_net")
    for model in models:
        st = MODEL_STYLE[model]
        ws = np.asarray(sorted(w for (m, w) in d if m == model))
        mu, sd = (np.asarray(v) for v in zip(*(mean_spread(d[(model, w)]) for w in ws)))
        e = np.asarray([mse[(model, w)].mean() for w in ws])
        ok = (e <= TRAINED_MSE) & (np.asarray([acc[(model, w)].mean() for w in ws]) >= TRAINED_ACC)
        name = MODELS.get(model, model)
        left.plot(ws, mu, "-", color=st["color"], lw=1.5, label=f"{name}, full batch")
        left.errorbar(ws, mu, yerr=sd, fmt="none", ecolor=st["color"], capsize=3)
        left.plot(ws[ok], mu[ok], ls="none", ms=6, **st)
        left.plot(ws[~ok], mu[~ok], ls="none", ms=6, mfc="white", **st)
        if paper_recipe is not None:
            pw, pd = ntk_distance.point_values(paper_recipe, result["task"], model, "dist_net_lin", line="adam")
            left.plot(pw, pd.mean(axis=1), ":", color=st["color"], lw=1.2, label=f"{name}, paper's recipe")
        right.plot(ws, e, "-", color=st["color"], lw=1.5)
        right.plot(ws[ok], e[ok], ls="none", ms=6, **st)
        right.plot(ws[~ok], e[~ok], ls="none", ms=6, mfc="white", **st)
    right.axhline(TRAINED_MSE, color="0.4", ls=":", lw=1)
    _width_axis(left, ws)
    _readable_log_y(left)
    _width_axis(right, ws, ylog=False)
    right.set_ylim(0, 1.1)
    left.set_ylabel("net vs own linearisation")
    right.set_ylabel("training MSE")
    from matplotlib.lines import Line2D

    handles, labels = left.get_legend_handles_labels()
    handles += [Line2D([], [], ls="none", marker="o", mfc="white", color="0.3"), Line2D([], [], ls=":", color="0.4")]
    labels += ["hollow marker: did not train", "training-MSE criterion"]
    fig.legend(handles, labels, loc="outside lower center", ncol=1)
    return fig
