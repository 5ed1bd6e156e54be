"""Where every data file the book reads comes from, and how to fetch it (``make data``).

:data:`FILES` lists each file under its path in a data directory (``mnist/...``): the sha256 the
loaders check, its canonical download URL(s) with the sha256 (or published md5) of that download,
and how the book's file is derived from the download (``derive``):

``copy``
    the file is the download (the MNIST and Fashion-MNIST IDX ``.gz`` files). The loaders check the
    sha256 of the *gunzipped* content, so a re-compressed copy (Debian's Fashion-MNIST, the staged
    MNIST) is accepted; a fresh download is also checked against the canonical ``.gz``'s sha256.
``head``
    the first ``head_bytes`` bytes of the download, which stops there: TinyStories' train text
    (1.9 GB) cut after 2 MiB = 2,097,152 bytes, in the middle of a story; the loader keeps the 2,316
    complete stories before the last ``<|endoftext|>``. The cut is checked; the canonical file's own
    sha256 is not recorded (it was never downloaded whole).
``cifar10-subset``
    built from the canonical CIFAR-10 python archive (checked against its sha256 and the md5 its
    page publishes, kept next to the subset): the first 1,000 training and the first 200 test images
    of each class in the archive's order (``data_batch_1`` .. ``data_batch_5``, then ``test_batch``),
    classes interleaved (0, 1, ..., 9, 0, 1, ...) so that any prefix is class-balanced, lossless
    pixels, in the layout of the staged JPEG-q75 file (:func:`build_cifar10_subset`). The file is
    written deterministically, but its sha256 is not recorded yet (no archive could be downloaded
    where the book was made): its layout is checked instead.
``shipped``
    in the repository itself, under ``data/`` at its root (:func:`shipped_dir`): the transformer
    replay, with its provenance in ``data/mi-ntk/PROVENANCE.md``.
``none``
    no public route: the JPEG-q75 CIFAR-10 subset the stored results were computed from. Where it
    is missing the lossless subset takes its place (``replaces``), and the loader says which one it
    read.

Downloads are atomic: the bytes go to ``<name>.part`` next to the final file, are checked, and only
then renamed. On a checksum error, an interrupted transfer or any other failure the ``.part`` file is
removed and nothing appears under the final name; a rerun starts that file again. A file already
present with the right checksum is not downloaded again.

Command line (``python -m ntkbook.data``, which ``make data`` calls)::

    python -m ntkbook.data fetch --all [--dest DIR]            # every file of every chapter
    python -m ntkbook.data fetch --chapter gemma [--dest DIR]  # the files one chapter reads
    python -m ntkbook.data fetch --only mnist cifar10          # data sets by name
    python -m ntkbook.data list                                # the table, with the chapters

``DIR`` defaults to ``$NTKBOOK_DATA``, else the user cache ``~/.cache/ntkbook`` (both searched by
the loaders).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import http.client
import io
import os
import pickle
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ntkbook.errors import InputError, NtkbookError
from ntkbook.paths import repo_root
from ntkbook.progress import Progress

__all__ = [
    "DataFile", "FILES", "DATASETS", "CHAPTERS", "DataNotFoundError", "ChecksumError", "DownloadError",
    "data_file", "files_of", "default_dest", "user_cache", "shipped_dir", "file_sha256",
    "verify_file", "download", "fetch_file", "fetch", "build_cifar10_subset",
    "check_cifar10_subset", "main",
]


class DataNotFoundError(NtkbookError, FileNotFoundError):
    """A data file was found in none of the searched places and could not be downloaded."""


class ChecksumError(NtkbookError, ValueError):
    """A data file's content does not match its known checksum (or, unrecorded, its layout)."""


class DownloadError(NtkbookError, OSError):
    """A download failed or was cut short (the network, the server, a missing file there)."""


MiB = 1 << 20


@dataclass(frozen=True)
class DataFile:
    """One file the book reads, and its route from a canonical source (see the module docstring)."""

    path: str  # relative to a data directory: "<data set>/<file name>"
    sha256: str | None  # what the loaders check (None: not recorded; see derive)
    checked: str  # "bytes": sha256 of the file; "gunzipped": of its decoded content
    derive: str  # "copy", "head", "cifar10-subset", "shipped" or "none"
    note: str  # provenance in one sentence (README table, `list`)
    urls: tuple[str, ...] = ()  # canonical download URL(s), tried in order
    download_sha256: str | None = None  # sha256 of the canonical download (None: unrecorded)
    download_md5: str | None = None  # the md5 the source publishes for its download
    download_as: str | None = None  # where the raw download is kept, relative (CIFAR-10 archive)
    head_bytes: int | None = None  # derive "head": how many bytes of the download
    replaces: str | None = None  # path of a file that, when present, makes this one unneeded

    @property
    def dataset(self) -> str:
        """The data set's folder in a data directory (``"mnist"``)."""
        return self.path.split("/", 1)[0]

    @property
    def name(self) -> str:
        """The file name (``"t10k-labels-idx1-ubyte.gz"``)."""
        return self.path.split("/", 1)[1]


_MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
               "https://storage.googleapis.com/cvdf-datasets/mnist/")
_FASHION_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
_IDX = {
    # file: (sha256 of the canonical .gz, md5 of the canonical .gz, sha256 of the gunzipped IDX)
    "mnist": {
        "train-images-idx3-ubyte.gz": ("440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                                       "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                                       "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
        "train-labels-idx1-ubyte.gz": ("3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                                       "d53e105ee54ea40749a09fcbcd1e9432",
                                       "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
        "t10k-images-idx3-ubyte.gz": ("8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                                      "9fb629c4189551a2d022fa330f9573f3",
                                      "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
        "t10k-labels-idx1-ubyte.gz": ("f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                                      "ec29112dd5afa0611ce80d1b7f02629c",
                                      "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": ("3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
                                       "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                                       "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
        "train-labels-idx1-ubyte.gz": ("a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                                       "25c81989df183df01b3e8a0aad5dffbe",
                                       "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
        "t10k-images-idx3-ubyte.gz": ("346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
                                      "bef4ecab320f06d8554ea6380940ec79",
                                      "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
        "t10k-labels-idx1-ubyte.gz": ("67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
                                      "bb300cfdad3c16e7a12a480ee83cd310",
                                      "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
    },
}
_IDX_NOTE = {
    "mnist": "MNIST (LeCun, Cortes, Burges; CC BY-SA 3.0), the IDX file as distributed (PyTorch's and "
             "TensorFlow's mirrors of yann.lecun.com)",
    "fashion-mnist": "Fashion-MNIST (Zalando SE; MIT), the IDX file as distributed by Zalando Research",
}
_IDX_URLS = {"mnist": _MNIST_URLS, "fashion-mnist": _FASHION_URLS}

CIFAR10_ARCHIVE = "cifar10/cifar-10-python.tar.gz"
CIFAR10_JPEG = "cifar10/cifar10-jpeg-q75-10k-2k.npz"
CIFAR10_LOSSLESS = "cifar10/cifar10-lossless-10k-2k.npz"
TINYSTORIES = "tinystories/tinystories_train_head_2MiB.txt"
TRANSFORMER_REPLAY = "mi-ntk/transformer_p29_seed2_init_and_order.npz"

#: every data file the book reads, with its route
FILES: tuple[DataFile, ...] = (
    *(DataFile(path=f"{ds}/{name}", sha256=content, checked="gunzipped", derive="copy",
               note=_IDX_NOTE[ds], urls=tuple(base + name for base in _IDX_URLS[ds]),
               download_sha256=raw, download_md5=md5)
      for ds, files in _IDX.items() for name, (raw, md5, content) in files.items()),
    DataFile(path=CIFAR10_JPEG,
             sha256="8ed58942420dbb58883aa71dfca7209ef3d48a2aeff17e5e13c000d6b415f147",
             checked="bytes", derive="none",
             note="CIFAR-10 (Krizhevsky 2009), 10k/2k subset decoded from a public JPEG (quality 75) "
                  "re-encoding: the stored results were computed from it; it has no public download"),
    DataFile(path=CIFAR10_LOSSLESS, sha256=None, checked="bytes", derive="cifar10-subset",
             note="CIFAR-10 (Krizhevsky 2009), the same 10k/2k layout with the archive's lossless "
                  "pixels: the first 1,000 train / 200 test images of each class in archive order, "
                  "classes interleaved",
             urls=("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
             download_sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
             download_md5="c58f30108f718f92721af3b95e74349a",
             download_as=CIFAR10_ARCHIVE, replaces=CIFAR10_JPEG),
    DataFile(path=TINYSTORIES,
             sha256="5352b299dcb1a32898b2d779b145b5a05f3e1265953fd21c264c9f9f9c9ae33d",
             checked="bytes", derive="head",
             note="TinyStories (Eldan & Li 2023; CDLA-Sharing-1.0): the first 2 MiB of "
                  "TinyStories-train.txt (2,316 complete stories; the cut one is dropped by the loader)",
             urls=("https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/"
                   "TinyStories-train.txt",),
             head_bytes=2 * MiB),
    DataFile(path=TRANSFORMER_REPLAY,
             sha256="c5626d683bcc0b26122c87bc3c6363d2cb61a28aa1ed7df7b50edc345a91c188",
             checked="bytes", derive="shipped",
             note="initial weights, split and batch order of the author's one-layer-transformer run "
                  "(Paper B), made by replaying the random-number calls of his public notebook with "
                  "torch 2.13 CPU; shipped with the book (data/mi-ntk/PROVENANCE.md)"),
)

#: the data sets (folders of a data directory), in table order
DATASETS: tuple[str, ...] = tuple(dict.fromkeys(f.dataset for f in FILES))

#: the data sets each chapter reads (chapter = file name in book/ without ``.md``); a chapter that
#: reads none is listed with an empty tuple, so every chapter is accounted for
CHAPTERS: dict[str, tuple[str, ...]] = {
    "intro": ("mnist",),
    "ntk_in_one_page": (),
    "entk_lanczos": ("mnist",),
    "attention_width": ("mnist", "fashion-mnist", "cifar10"),
    "influence": ("mnist", "fashion-mnist", "cifar10"),
    "modular_mlp": (),
    "modular_transformer": ("mi-ntk",),
    "gemma": ("tinystories",),
    "scorecard": (),
    "report": (),
    "status": (),
    "fork": (),
    "cite": (),
    "references": (),
}


def data_file(path: str) -> DataFile:
    """The entry of :data:`FILES` for ``path`` (``"mnist/t10k-labels-idx1-ubyte.gz"``)."""
    for f in FILES:
        if f.path == path:
            return f
    raise KeyError(f"no data file {path!r} in ntkbook.data.fetch.FILES")


def files_of(datasets: Sequence[str]) -> list[DataFile]:
    """The entries of :data:`FILES` in the given data sets (folders), in table order."""
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        raise InputError(f"unknown data set(s) {unknown}; the book's data sets are {list(DATASETS)}")
    return [f for f in FILES if f.dataset in datasets]


def user_cache() -> Path:
    """``$XDG_CACHE_HOME/ntkbook`` (default ``~/.cache/ntkbook``): the loaders' last data directory
    and where they download what they miss."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ntkbook"


def default_dest() -> Path:
    """Where ``fetch`` writes without ``--dest``: ``$NTKBOOK_DATA``, else :func:`user_cache`."""
    return Path(os.environ["NTKBOOK_DATA"]) if os.environ.get("NTKBOOK_DATA") else user_cache()


def shipped_dir() -> Path:
    """The data directory inside the repository, ``<repo>/data``: files shipped with the book."""
    return repo_root() / "data"


# --------------------------------------------------------------------------------------------------
# checksums
# --------------------------------------------------------------------------------------------------
def file_sha256(path: str | os.PathLike, checked: str = "bytes") -> str:
    """sha256 of a file's bytes (``checked="bytes"``) or of its gunzipped content (``"gunzipped"``),
    read in 1 MiB chunks. A file that is not valid gzip raises :class:`ChecksumError`."""
    h = hashlib.sha256()
    try:
        with (gzip.open(path, "rb") if checked == "gunzipped" else open(path, "rb")) as fh:
            for chunk in iter(lambda: fh.read(MiB), b""):
                h.update(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ChecksumError(f"{path} is not a readable gzip file ({exc}); delete it and fetch it again "
                            "(make data)") from exc
    return h.hexdigest()


def verify_file(f: DataFile, path: str | os.PathLike, *, url: str | None = None) -> None:
    """Check the file at ``path`` as the loaders do: its recorded sha256, or, where none is recorded
    (the lossless CIFAR-10 subset), its layout. Raises :class:`ChecksumError`; ``url``: the file is
    a download from there (the message says so)."""
    if f.sha256 is None:
        check_cifar10_subset(path)
        return
    got = file_sha256(path, f.checked)
    if got == f.sha256:
        return
    what = "the decoded content has sha256" if f.checked == "gunzipped" else "sha256"
    if url is not None:
        raise ChecksumError(
            f"{f.dataset}: the download from {url} does not give {f.path}: {what} {got}, expected "
            f"{f.sha256}. It was corrupted in transit or the source changed; nothing was kept. Rerun "
            "`make data`; if it persists, the source has changed: report it.")
    raise ChecksumError(
        f"{f.dataset}: checksum mismatch for {path}: {what} {got}, expected {f.sha256}. The file "
        "is corrupt or another version; delete it and fetch it again (make data).")


def _check_download(f: DataFile, path: Path, url: str) -> None:
    """The raw download against the canonical download's recorded sha256 and published md5."""
    for algo, want in (("sha256", f.download_sha256), ("md5", f.download_md5)):
        if want is None:
            continue
        h = hashlib.new(algo)
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(MiB), b""):
                h.update(chunk)
        if h.hexdigest() != want:
            raise ChecksumError(
                f"{f.dataset}: the download from {url} has {algo} {h.hexdigest()}, expected {want}: "
                "it was corrupted in transit or the source changed; nothing was kept. Rerun `make data`; "
                f"if it persists, download {url} by hand and compare its {algo}.")


# --------------------------------------------------------------------------------------------------
# downloads
# --------------------------------------------------------------------------------------------------
def download(url: str, dest: str | os.PathLike, *, check: Callable[[Path], None] | None = None,
             max_bytes: int | None = None, timeout: float = 60.0, desc: str = "") -> Path:
    """Download ``url`` to ``dest`` atomically and return ``dest``.

    The bytes go to ``<dest>.part``; ``check(part)`` (which raises :class:`ChecksumError`) runs on
    it; only then is it renamed to ``dest``. With ``max_bytes`` only the first ``max_bytes`` bytes
    are kept (asked for with an HTTP Range header; a server that sends the whole file is read only
    that far). A transfer that ends before its ``Content-Length`` (or before ``max_bytes``) raises
    :class:`DownloadError`, as does any network or HTTP failure. On every failure the ``.part`` file
    is removed and ``dest`` is left as it was. Progress is reported (:class:`ntkbook.progress.Progress`)
    when the size is known.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    headers = {"User-Agent": "ntkbook-data-fetch"}
    if max_bytes is not None:
        headers["Range"] = f"bytes=0-{max_bytes - 1}"
    got, want = 0, max_bytes
    try:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
                length = resp.headers.get("Content-Length")
                if want is None and length is not None:
                    want = int(length)
                bar = Progress(want, desc or dest.name) if want else None
                with open(part, "wb") as fh:
                    while max_bytes is None or got < max_bytes:
                        chunk = resp.read(MiB if max_bytes is None else min(MiB, max_bytes - got))
                        if not chunk:
                            break
                        fh.write(chunk)
                        got += len(chunk)
                        if bar is not None:
                            bar.update(len(chunk))
                if bar is not None:
                    bar.close()
        except http.client.IncompleteRead:
            pass  # reported below with the byte counts
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            if isinstance(exc, urllib.error.HTTPError):
                reason = f"HTTP {exc.code} {exc.reason}"
            else:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise DownloadError(
                f"the download from {url} failed ({type(exc).__name__}: {reason}); nothing was kept. "
                f"Check the network and rerun `make data`, or download it by hand to {dest}.") from exc
        if want is not None and got < want:
            raise DownloadError(
                f"the download from {url} was interrupted after {got:,} of {want:,} bytes; nothing was "
                f"kept. Rerun `make data` (it starts {dest.name} again).")
        if check is not None:
            check(part)
        os.replace(part, dest)
        return dest
    finally:
        part.unlink(missing_ok=True)


def _download_any(f: DataFile, dest: Path, *, check: Callable[[Path, str], None],
                  max_bytes: int | None = None) -> Path:
    """Download ``f``'s source to ``dest`` from its first URL that works (mirrors in order);
    ``check(part, url)`` checks the bytes. When every URL fails, a checksum error (a mirror served
    wrong bytes) wins over network errors."""
    errors: list[NtkbookError] = []
    for url in f.urls:
        try:
            return download(url, dest, check=lambda part, url=url: check(part, url),
                            max_bytes=max_bytes, desc=f.path)
        except (DownloadError, ChecksumError) as exc:
            errors.append(exc)
    bad = [e for e in errors if isinstance(e, ChecksumError)]
    if bad or len(errors) == 1:
        raise (bad or errors)[-1]
    raise DownloadError(f"every source of {f.path} failed: " + " | ".join(str(e) for e in errors))


# --------------------------------------------------------------------------------------------------
# derived files
# --------------------------------------------------------------------------------------------------
_CIFAR_SHAPES = {"x_train": (10000, 32, 32, 3), "y_train": (10000,), "x_test": (2000, 32, 32, 3),
                 "y_test": (2000,)}


def _interleaved_first(labels: np.ndarray, n_per_class: int, n_classes: int) -> np.ndarray:
    """Indices of the first ``n_per_class`` examples of each class, interleaved (class 0, 1, ...)."""
    picks = []
    for c in range(n_classes):
        idx = np.flatnonzero(labels == c)[:n_per_class]
        if idx.size < n_per_class:
            raise ChecksumError(f"the CIFAR-10 archive has only {idx.size} examples of class {c}, "
                                f"{n_per_class} needed: it is not the canonical archive")
        picks.append(idx)
    return np.stack(picks, axis=1).reshape(-1)


def _save_npz_deterministic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An ``.npz`` whose bytes depend only on the arrays: stored (not deflated) members with a
    fixed time stamp, so that every build of the same arrays has the same sha256."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def build_cifar10_subset(archive: str | os.PathLike, out: str | os.PathLike,
                         n_train_per_class: int = 1000, n_test_per_class: int = 200) -> None:
    """Write the book's CIFAR-10 subset, lossless, from the canonical python archive.

    ``archive``: ``cifar-10-python.tar.gz`` (members ``cifar-10-batches-py/data_batch_1`` .. ``_5``,
    ``test_batch``, ``batches.meta``: pickles with ``data`` (N, 3072) uint8 in channel-major order
    and ``labels``). Check it first: pickles execute code, so only the verified canonical archive
    may be read. ``out``: an ``.npz`` with ``x_train`` (10n, 32, 32, 3) uint8 NHWC, ``y_train``
    (10n,) uint8, ``x_test``, ``y_test``, ``class_names`` (10,) str: the first ``n_*_per_class``
    images of each class in the archive's order (training batches 1..5 in turn), interleaved by
    class, so that any prefix is class-balanced.
    """
    with tarfile.open(archive, "r:gz") as tar:
        def member(name: str) -> dict:
            fh = tar.extractfile(f"cifar-10-batches-py/{name}")
            return pickle.load(fh, encoding="bytes")

        train = [member(f"data_batch_{i}") for i in range(1, 6)]
        test = member("test_batch")
        names = [n.decode() for n in member("batches.meta")[b"label_names"]]
    arrays = {}
    for split, batches, n in (("train", train, n_train_per_class), ("test", [test], n_test_per_class)):
        x = np.concatenate([np.asarray(b[b"data"], dtype=np.uint8) for b in batches])
        y = np.concatenate([np.asarray(b[b"labels"], dtype=np.int64) for b in batches])
        order = _interleaved_first(y, n, len(names))
        arrays[f"x_{split}"] = x[order].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        arrays[f"y_{split}"] = y[order].astype(np.uint8)
    arrays = {"x_train": arrays["x_train"], "y_train": arrays["y_train"], "x_test": arrays["x_test"],
              "y_test": arrays["y_test"], "class_names": np.array(names)}
    _save_npz_deterministic(Path(out), arrays)


def check_cifar10_subset(path: str | os.PathLike) -> None:
    """Check a CIFAR-10 subset file's layout (shapes, dtypes, interleaved balanced labels, ten class
    names); raises :class:`ChecksumError` naming what is wrong."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ChecksumError(f"cifar10: {path} is not a readable .npz ({exc}); delete it and rebuild it "
                            "(make data)") from exc
    wrong = []
    for key, shape in _CIFAR_SHAPES.items():
        a = arrays.get(key)
        if a is None or a.shape != shape or a.dtype != np.uint8:
            wrong.append(f"{key} {None if a is None else (a.shape, str(a.dtype))}, expected {shape} uint8")
    for key in ("y_train", "y_test"):
        a = arrays.get(key)
        if a is not None and a.ndim == 1 and not np.array_equal(a, np.tile(np.arange(10), a.size // 10)):
            wrong.append(f"{key} is not the interleaved labels 0..9, 0..9, ...")
    names = arrays.get("class_names")
    if names is None or names.shape != (10,):
        wrong.append("class_names is not 10 names")
    if wrong:
        raise ChecksumError(f"cifar10: {path} is not the book's CIFAR-10 subset: " + "; ".join(wrong)
                            + ". Delete it and rebuild it (make data).")


# --------------------------------------------------------------------------------------------------
# fetching
# --------------------------------------------------------------------------------------------------
def _present(f: DataFile, path: Path, report: Callable[[str], None]) -> bool:
    if not path.is_file():
        return False
    try:
        verify_file(f, path)
    except ChecksumError as exc:
        report(f"{f.path}: present but wrong ({exc}); fetching it again")
        return False
    return True


def fetch_file(f: DataFile, dest: str | os.PathLike, *, report: Callable[[str], None] = print) -> Path:
    """Make ``f`` available under the data directory ``dest`` and return where it is.

    A file present with the right checksum is kept; a shipped file is checked where the repository
    holds it; a file whose ``replaces`` file is present is not needed (that path is returned);
    otherwise the file is downloaded (and derived) atomically. Raises :class:`DownloadError`,
    :class:`ChecksumError` (nothing left under the final name) or, for a file without a public route,
    :class:`DataNotFoundError`.
    """
    dest = Path(dest)
    target = dest / f.path
    if f.derive == "shipped":
        where = target if target.is_file() else shipped_dir() / f.path
        if not where.is_file():
            raise DataNotFoundError(f"{f.path} ships with the book but is missing from {where}; restore it "
                                    "from the repository (git checkout -- data/)")
        verify_file(f, where)
        report(f"{f.path}: " + ("present, checksum ok" if where == target else
                                f"shipped with the book in {where}, checksum ok"))
        return where
    if _present(f, target, report):
        report(f"{f.path}: present, checksum ok")
        return target
    if f.replaces is not None and _present(data_file(f.replaces), dest / f.replaces, report):
        report(f"{f.path}: not needed, {f.replaces} is present (the stored results' variant)")
        return dest / f.replaces
    if f.derive == "none":
        raise DataNotFoundError(f"{f.path} has no public download ({f.note}); the loaders use "
                                "the route of the file that replaces it")
    report(f"{f.path}: fetching from {f.urls[0]}")
    if f.derive == "copy":
        def check(part: Path, url: str) -> None:
            _check_download(f, part, url)
            verify_file(f, part, url=url)

        _download_any(f, target, check=check)
    elif f.derive == "head":
        _download_any(f, target, max_bytes=f.head_bytes, check=lambda part, url: verify_file(f, part, url=url))
    elif f.derive == "cifar10-subset":
        archive = dest / f.download_as
        archive_entry = dataclasses.replace(f, path=f.download_as, sha256=f.download_sha256)
        if not _present(archive_entry, archive, report):
            _download_any(f, archive, check=lambda part, url: _check_download(f, part, url))
        report(f"{f.path}: building the subset from {archive}")
        part = target.with_name(target.name + ".part")
        try:
            build_cifar10_subset(archive, part)
            verify_file(f, part)
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
    else:
        raise ValueError(f"unknown derivation {f.derive!r} of {f.path}")
    report(f"{f.path}: ok")
    return target


def fetch(datasets: Sequence[str], dest: str | os.PathLike | None = None, *,
          report: Callable[[str], None] = print) -> list[Path]:
    """Fetch every file of the given data sets into ``dest`` (default :func:`default_dest`); the
    files' paths, in table order. The JPEG-q75 CIFAR-10 subset has no route: its lossless
    replacement is fetched where it is missing."""
    dest = Path(dest) if dest is not None else default_dest()
    out = []
    for f in files_of(datasets):
        if f.derive == "none":
            continue
        out.append(fetch_file(f, dest, report=report))
    return out


def _table() -> str:
    lines = []
    for f in FILES:
        chapters = [c for c, ds in CHAPTERS.items() if f.dataset in ds]
        route = {"copy": "download", "head": f"first {f.head_bytes or 0:,} bytes of the download",
                 "cifar10-subset": "built from the downloaded archive", "shipped": "shipped in data/",
                 "none": "no public download"}[f.derive]
        lines.append(f"{f.path}\n  sha256 {f.sha256 or '(not recorded; layout checked)'}"
                     f"{' of the gunzipped content' if f.checked == 'gunzipped' else ''}\n"
                     f"  route: {route}{' ' + ' | '.join(f.urls) if f.urls else ''}\n"
                     + (f"  download sha256 {f.download_sha256}\n" if f.download_sha256 else "")
                     + (f"  download md5 {f.download_md5}\n" if f.download_md5 else "")
                     + f"  chapters: {', '.join(chapters)}\n  {f.note}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog: str = "python -m ntkbook.data") -> int:
    """``fetch`` and ``list`` (see the module docstring); errors print as one line, exit status 2."""
    parser = argparse.ArgumentParser(prog=prog,
                                     description="The book's data files: list their routes, fetch them.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fetch", help="download and check the data files (skips those present)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every data set of every chapter")
    which.add_argument("--only", nargs="+", metavar="NAME", choices=DATASETS,
                       help=f"data sets: {', '.join(DATASETS)}")
    which.add_argument("--chapter", nargs="+", metavar="NAME", choices=list(CHAPTERS),
                       help=f"chapters: {', '.join(CHAPTERS)}")
    p.add_argument("--dest", help="data directory to fill (default $NTKBOOK_DATA, else ~/.cache/ntkbook)")
    sub.add_parser("list", help="every data file: path, sha256, route, chapters")
    args = parser.parse_args(argv)
    if args.command == "list":
        print(_table())
        return 0
    try:
        if args.all:
            datasets = list(DATASETS)
        elif args.only:
            datasets = args.only
        else:
            datasets = [d for d in DATASETS if any(d in CHAPTERS[c] for c in args.chapter)]
        dest = Path(args.dest) if args.dest else default_dest()
        print(f"data directory: {dest}")
        fetch(datasets, dest)
    except NtkbookError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if dest.resolve() not in (default_dest().resolve(), user_cache().resolve()):
        print(f"done; set NTKBOOK_DATA={dest} so that the loaders find these files")
    else:
        print("done")
    return 0
