"""The data routes (``ntkbook.data.fetch``) against a local HTTP server; no internet.

The server (``http.server`` in a thread) serves a temporary folder: real staged files (MNIST test
labels, the TinyStories sample), small fakes with their own sha256, a fake CIFAR-10 archive in the
real layout, and ``/cut/<file>``, which announces the whole file's Content-Length and closes the
connection half way. Table entries are pointed at it with ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import pickle
import shutil
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from ntkbook import data
from ntkbook.data import fetch

REPO = Path(__file__).resolve().parents[1]
#: sha256 of the staged (re-compressed) MNIST test labels: not the canonical .gz, same content
STAGED_T10K_LABELS_GZ = "1e9ac55a549f07d1c12237d993e791fe57b83bc24b6d7e1667943f55c51e0986"


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass

    def do_GET(self):
        self.server.hits.append(self.path)
        if self.path.startswith("/cut/"):
            body = (Path(self.directory) / self.path[len("/cut/"):]).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """``(base_url, served_folder, hits)``: a local HTTP server on a free port."""
    root = tmp_path / "served"
    root.mkdir()
    handler = lambda *a, **kw: _Handler(*a, directory=str(root), **kw)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.hits = []
    httpd.handle_error = lambda request, address: None  # a client that stops reading is expected
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", root, httpd.hits
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No data directory but an empty user cache under tmp_path; downloads allowed."""
    monkeypatch.delenv("NTKBOOK_DATA", raising=False)
    monkeypatch.delenv("NTKBOOK_OFFLINE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "ntkbook"


def _route(monkeypatch, path: str, **changes) -> fetch.DataFile:
    """Replace the table entry of ``path`` (fields ``changes``) for this test; the new entry."""
    new = dataclasses.replace(fetch.data_file(path), **changes)
    monkeypatch.setattr(fetch, "FILES", tuple(new if f.path == path else f for f in fetch.FILES))
    return new


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# --------------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------------
def test_every_chapter_and_data_set_is_in_the_table():
    chapters = {p.stem for p in (REPO / "book").glob("*.md")}
    assert set(fetch.CHAPTERS) == chapters
    assert {d for ds in fetch.CHAPTERS.values() for d in ds} == set(fetch.DATASETS)
    for f in fetch.FILES:
        assert f.derive in ("copy", "head", "cifar10-subset", "shipped", "none"), f.path
        assert (f.derive in ("shipped", "none")) == (not f.urls), f.path  # a route, or why none
        assert f.sha256 is not None or f.derive == "cifar10-subset", f.path
        assert f.checked in ("bytes", "gunzipped")
    assert len({f.path for f in fetch.FILES}) == len(fetch.FILES)


def test_recorded_checksums_match_the_staged_files(data_dir):
    for f in fetch.FILES:
        if f.sha256 is not None:
            fetch.verify_file(f, data_dir / f.path)  # raises on a mismatch


def test_the_shipped_replay_is_found_without_a_data_directory(env):
    replay = data.load_transformer_replay()
    shipped = REPO / "data" / fetch.TRANSFORMER_REPLAY
    assert str(shipped) in replay.source
    assert _sha(shipped.read_bytes()) == fetch.data_file(fetch.TRANSFORMER_REPLAY).sha256
    assert (shipped.parent / "PROVENANCE.md").is_file()


# --------------------------------------------------------------------------------------------------
# downloads
# --------------------------------------------------------------------------------------------------
def test_real_entry_fetched_then_skipped(server, tmp_path, monkeypatch, data_dir):
    base, root, hits = server
    staged = data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz"
    shutil.copy(staged, root / staged.name)
    entry = _route(monkeypatch, "mnist/t10k-labels-idx1-ubyte.gz", urls=(base + staged.name,),
                   download_sha256=STAGED_T10K_LABELS_GZ, download_md5=None)  # the staged copy is re-compressed
    dest = tmp_path / "dest"
    lines: list[str] = []
    assert fetch.fetch_file(entry, dest, report=lines.append) == dest / entry.path
    assert (dest / entry.path).read_bytes() == staged.read_bytes()
    assert _leftovers(dest) == [staged.name] and len(hits) == 1
    assert fetch.fetch_file(entry, dest, report=lines.append) == dest / entry.path
    assert len(hits) == 1 and lines[-1].endswith("present, checksum ok")  # not downloaded again


def test_canonical_checksum_rejects_other_bytes(server, tmp_path, monkeypatch, data_dir):
    """The real entry checks the canonical .gz's sha256: the staged re-compressed copy (same
    content, other bytes) is refused, and nothing is left behind."""
    base, root, _ = server
    staged = data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz"
    shutil.copy(staged, root / staged.name)
    entry = _route(monkeypatch, "mnist/t10k-labels-idx1-ubyte.gz", urls=(base + staged.name,))
    with pytest.raises(fetch.ChecksumError, match=f"download from {base}.*sha256 {STAGED_T10K_LABELS_GZ}"):
        fetch.fetch_file(entry, tmp_path / "dest", report=lambda s: None)
    assert _leftovers(tmp_path / "dest") == []


def test_corrupted_download(server, tmp_path):
    base, root, _ = server
    good = b"the right bytes\n" * 1000
    (root / "file.bin").write_bytes(good[:-1] + b"X")  # served bytes differ by one
    entry = fetch.DataFile(path="fake/file.bin", sha256=_sha(good), checked="bytes", derive="copy",
                           note="a fake", urls=(base + "file.bin",))
    with pytest.raises(fetch.ChecksumError, match=rf"download from {base}file.bin does not give fake/file.bin: "
                                                  rf"sha256 {_sha(good[:-1] + b'X')}, expected {_sha(good)}.*nothing was kept"):
        fetch.fetch_file(entry, tmp_path / "dest", report=lambda s: None)
    assert _leftovers(tmp_path / "dest") == []  # neither file.bin nor file.bin.part
    (root / "file.bin").write_bytes(good)
    fetch.fetch_file(entry, tmp_path / "dest", report=lambda s: None)
    assert (tmp_path / "dest" / "fake" / "file.bin").read_bytes() == good


def test_interrupted_download_then_rerun(server, tmp_path):
    base, root, hits = server
    body = bytes(range(256)) * 4096  # 1 MiB
    (root / "big.bin").write_bytes(body)
    entry = fetch.DataFile(path="fake/big.bin", sha256=_sha(body), checked="bytes", derive="copy",
                           note="a fake", urls=(base + "cut/big.bin",))
    dest = tmp_path / "dest"
    with pytest.raises(fetch.DownloadError, match=r"cut/big.bin was interrupted after 524,288 of 1,048,576 bytes"):
        fetch.fetch_file(entry, dest, report=lambda s: None)
    assert _leftovers(dest) == []
    (dest / "fake").mkdir(parents=True, exist_ok=True)
    (dest / "fake" / "big.bin.part").write_bytes(b"left by a killed run")  # a rerun starts afresh
    entry = dataclasses.replace(entry, urls=(base + "cut/big.bin", base + "big.bin"))  # a mirror
    fetch.fetch_file(entry, dest, report=lambda s: None)
    assert (dest / "fake" / "big.bin").read_bytes() == body and _leftovers(dest) == ["big.bin"]
    assert hits[-2:] == ["/cut/big.bin", "/big.bin"]


def test_missing_file_on_the_server(server, tmp_path):
    base, _, _ = server
    entry = fetch.DataFile(path="fake/none.bin", sha256="0" * 64, checked="bytes", derive="copy",
                           note="a fake", urls=(base + "none.bin",))
    with pytest.raises(fetch.DownloadError, match=rf"download from {base}none.bin failed \(HTTPError: HTTP 404 .*make data"):
        fetch.fetch_file(entry, tmp_path / "dest", report=lambda s: None)
    entry = dataclasses.replace(entry, urls=(base + "none.bin", base + "mirror/none.bin"))
    with pytest.raises(fetch.DownloadError, match=rf"every source of fake/none.bin failed: .*{base}none.bin "
                                                  rf".*HTTP 404.* \| .*{base}mirror/none.bin .*HTTP 404"):
        fetch.fetch_file(entry, tmp_path / "dest", report=lambda s: None)
    assert _leftovers(tmp_path / "dest") == []


def test_wrong_file_present_is_replaced(server, tmp_path):
    base, root, _ = server
    (root / "f.txt").write_bytes(b"good")
    entry = fetch.DataFile(path="fake/f.txt", sha256=_sha(b"good"), checked="bytes", derive="copy",
                           note="a fake", urls=(base + "f.txt",))
    (tmp_path / "dest" / "fake").mkdir(parents=True)
    (tmp_path / "dest" / "fake" / "f.txt").write_bytes(b"bad")
    lines: list[str] = []
    fetch.fetch_file(entry, tmp_path / "dest", report=lines.append)
    assert (tmp_path / "dest" / "fake" / "f.txt").read_bytes() == b"good"
    assert "present but wrong" in lines[0]


# --------------------------------------------------------------------------------------------------
# TinyStories: the first 2 MiB
# --------------------------------------------------------------------------------------------------
def _fake_stories(n: int) -> bytes:
    return "".join(f"Story {i}: once upon a time, a cat named Tom {i} was happy.\n<|endoftext|>\n"
                   for i in range(n)).encode()


def test_head_cut_and_complete_stories(server, tmp_path, monkeypatch, env):
    base, root, _ = server
    text = _fake_stories(200)
    (root / "train.txt").write_bytes(text)
    head = 5000  # falls inside a story
    entry = _route(monkeypatch, fetch.TINYSTORIES, urls=(base + "train.txt",), head_bytes=head,
                   sha256=_sha(text[:head]))
    path = fetch.fetch_file(entry, tmp_path / "dest", report=lambda s: None)
    assert path.read_bytes() == text[:head]
    stories = data.load_tinystories(tmp_path / "dest")
    complete = text[:head].decode().count("<|endoftext|>")
    assert len(stories) == complete and stories[-1] == f"Story {complete - 1}: once upon a time, a cat named Tom {complete - 1} was happy."
    assert all("<|endoftext|>" not in s for s in stories)
    # the source shorter than the head: an error, nothing kept
    (root / "short.txt").write_bytes(text[:100])
    entry = _route(monkeypatch, fetch.TINYSTORIES, urls=(base + "short.txt",), head_bytes=head)
    with pytest.raises(fetch.DownloadError, match="after 100 of 5,000 bytes"):
        fetch.fetch_file(entry, tmp_path / "dest2", report=lambda s: None)
    assert _leftovers(tmp_path / "dest2") == []


def test_real_tinystories_entry_and_loader_fetch(server, monkeypatch, env, data_dir):
    """The real entry (2 MiB head, recorded sha256) cuts the staged sample followed by more text,
    as the canonical train file would be; the loader fetches it into the user cache by itself."""
    base, root, hits = server
    sample = (data_dir / fetch.TINYSTORIES).read_bytes()
    (root / "TinyStories-train.txt").write_bytes(sample + b" more of the story.\n<|endoftext|>\nNext" * 1000)
    _route(monkeypatch, fetch.TINYSTORIES, urls=(base + "TinyStories-train.txt",))
    monkeypatch.setattr(fetch, "shipped_dir", lambda: env.parent / "no-repo-data")
    stories = data.load_tinystories()
    assert len(stories) == 2316 and (env / fetch.TINYSTORIES).read_bytes() == sample
    assert hits == ["/TinyStories-train.txt"]
    assert data.load_tinystories() == stories and len(hits) == 1  # found in the cache now


def test_offline_loader_does_not_download(server, monkeypatch, env):
    base, root, hits = server
    _route(monkeypatch, fetch.TINYSTORIES, urls=(base + "TinyStories-train.txt",))
    monkeypatch.setenv("NTKBOOK_OFFLINE", "1")
    with pytest.raises(data.DataNotFoundError, match="NTKBOOK_OFFLINE"):
        data.load_tinystories(env.parent / "nowhere")
    assert hits == []


# --------------------------------------------------------------------------------------------------
# CIFAR-10: the lossless subset from the canonical archive's layout
# --------------------------------------------------------------------------------------------------
CLASSES = list(data.CIFAR10_CLASSES)


def _fake_cifar_archive(path: Path, n_train: int, n_test: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """A ``cifar-10-python.tar.gz`` in the real layout: 5 training batches, ``test_batch``,
    ``batches.meta``; image ``i`` (over the training batches in order) has every red pixel equal to
    ``i % 251``, green ``i // 251 % 251``, blue its label. Returns (x_train NHWC, y_train, x_test, y_test)."""
    rng = np.random.default_rng(seed)

    def images(n, labels):
        i = np.arange(n)
        chw = np.empty((n, 3, 32, 32), dtype=np.uint8)
        chw[:, 0] = (i % 251)[:, None, None]
        chw[:, 1] = (i // 251 % 251)[:, None, None]
        chw[:, 2] = labels[:, None, None]
        chw[:, 0, 0, 1] = 7  # one pixel that differs, to catch a transposed layout
        return chw

    y_train = rng.integers(0, 10, n_train)
    y_test = rng.integers(0, 10, n_test)
    x_train, x_test = images(n_train, y_train), images(n_test, y_test)
    members = {}
    for b, chunk in enumerate(np.array_split(np.arange(n_train), 5)):
        members[f"data_batch_{b + 1}"] = {b"batch_label": b"training batch", b"labels": y_train[chunk].tolist(),
                                          b"data": x_train[chunk].reshape(-1, 3072), b"filenames": []}
    members["test_batch"] = {b"labels": y_test.tolist(), b"data": x_test.reshape(-1, 3072)}
    members["batches.meta"] = {b"label_names": [c.encode() for c in CLASSES], b"num_vis": 3072}
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in members.items():
            blob = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    nhwc = lambda x: x.transpose(0, 2, 3, 1)  # noqa: E731
    return nhwc(x_train), y_train, nhwc(x_test), y_test


def test_cifar_subset_builder(tmp_path):
    x_tr, y_tr, x_te, y_te = _fake_cifar_archive(tmp_path / "a.tar.gz", 300, 100)
    fetch.build_cifar10_subset(tmp_path / "a.tar.gz", tmp_path / "s.npz", n_train_per_class=5,
                               n_test_per_class=3)
    with np.load(tmp_path / "s.npz", allow_pickle=False) as z:
        assert z["x_train"].shape == (50, 32, 32, 3) and z["x_train"].dtype == np.uint8
        assert z["y_train"].tolist() == list(range(10)) * 5 and z["y_test"].tolist() == list(range(10)) * 3
        assert z["class_names"].tolist() == CLASSES
        # the k-th image of class c is the k-th image of class c in the archive's order
        for split, x, y, n in (("train", x_tr, y_tr, 5), ("test", x_te, y_te, 3)):
            want = np.stack([np.flatnonzero(y == c)[:n] for c in range(10)], axis=1).reshape(-1)
            np.testing.assert_array_equal(z[f"x_{split}"], x[want])
    first = (tmp_path / "s.npz").read_bytes()
    fetch.build_cifar10_subset(tmp_path / "a.tar.gz", tmp_path / "s2.npz", 5, 3)
    assert (tmp_path / "s2.npz").read_bytes() == first  # deterministic: a sha256 can be recorded
    with pytest.raises(fetch.ChecksumError, match="only .* examples of class"):
        fetch.build_cifar10_subset(tmp_path / "a.tar.gz", tmp_path / "s3.npz", 1000, 3)


def test_cifar_route_end_to_end(server, tmp_path, monkeypatch):
    """Archive served and checked (sha256 and md5), subset built at full size and layout-checked,
    the loader reads it as the lossless variant; the JPEG file, when present, makes it unneeded."""
    base, root, hits = server
    archive = root / "cifar-10-python.tar.gz"
    _fake_cifar_archive(archive, 12000, 2400)
    raw = archive.read_bytes()
    _route(monkeypatch, fetch.CIFAR10_LOSSLESS, urls=(base + archive.name,),
           download_sha256=_sha(raw), download_md5=hashlib.md5(raw).hexdigest())
    dest = tmp_path / "dest"
    fetch.fetch(["cifar10"], dest, report=lambda s: None)
    assert sorted(_leftovers(dest)) == ["cifar-10-python.tar.gz", "cifar10-lossless-10k-2k.npz"]
    ds = data.load_cifar10(dest)
    assert ds.source.startswith("CIFAR-10 lossless subset") and str(dest) in ds.source
    assert ds.x_train.shape == (10000, 32, 32, 3) and (np.bincount(ds.y_train[:100]) == 10).all()
    np.testing.assert_array_equal(ds.x_train[:10, 0, 0, 2] * 255, np.arange(10))  # blue = label
    # a rerun downloads nothing; a wrong archive is refused with nothing left behind
    fetch.fetch(["cifar10"], dest, report=lambda s: None)
    assert len(hits) == 1
    _route(monkeypatch, fetch.CIFAR10_LOSSLESS, urls=(base + archive.name,), download_sha256="0" * 64)
    with pytest.raises(fetch.ChecksumError, match="sha256"):
        fetch.fetch(["cifar10"], tmp_path / "dest2", report=lambda s: None)
    assert _leftovers(tmp_path / "dest2") == []
    # a data directory holding the JPEG-q75 file (the stored results' data) needs no lossless build
    jpeg = tmp_path / "dest3" / fetch.CIFAR10_JPEG
    jpeg.parent.mkdir(parents=True)
    monkeypatch.setattr(fetch, "FILES", tuple(dataclasses.replace(f, sha256=_sha(b"jpeg")) if
                                              f.path == fetch.CIFAR10_JPEG else f for f in fetch.FILES))
    jpeg.write_bytes(b"jpeg")
    assert fetch.fetch(["cifar10"], tmp_path / "dest3", report=lambda s: None) == [jpeg]
    assert len(hits) == 2  # only the refused archive's download since the first


def test_cifar_variants_of_the_staged_data(data_dir):
    ds = data.load_cifar10(data_dir)
    assert ds.source.startswith("CIFAR-10 JPEG-q75 subset")
    with pytest.raises(ValueError, match="unknown CIFAR-10 variant"):
        data.load_cifar10(data_dir, variant="png")


def test_cifar_layout_check(tmp_path):
    np.savez(tmp_path / "bad.npz", x_train=np.zeros((10, 32, 32, 3), np.uint8))
    with pytest.raises(fetch.ChecksumError, match="not the book's CIFAR-10 subset: x_train"):
        fetch.check_cifar10_subset(tmp_path / "bad.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(fetch.ChecksumError, match="not a readable .npz"):
        fetch.check_cifar10_subset(tmp_path / "junk.npz")


# --------------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------------
def test_cli_fetch_chapter_and_errors(server, tmp_path, monkeypatch, capsys, env):
    base, root, _ = server
    text = _fake_stories(100)
    (root / "train.txt").write_bytes(text)
    _route(monkeypatch, fetch.TINYSTORIES, urls=(base + "train.txt",), head_bytes=3000,
           sha256=_sha(text[:3000]))
    assert fetch.main(["fetch", "--chapter", "gemma", "--dest", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "tinystories/tinystories_train_head_2MiB.txt: ok" in out and "NTKBOOK_DATA=" in out
    assert (tmp_path / "d" / fetch.TINYSTORIES).read_bytes() == text[:3000]
    assert _leftovers(tmp_path / "d") == ["tinystories_train_head_2MiB.txt"]  # gemma reads nothing else
    _route(monkeypatch, fetch.TINYSTORIES, urls=(base + "missing.txt",))
    assert fetch.main(["fetch", "--only", "tinystories", "--dest", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the download from") and err.count("\n") == 1 and "missing.txt" in err
    with pytest.raises(SystemExit):
        fetch.main(["fetch", "--chapter", "no_such_chapter"])
    assert fetch.main(["list"]) == 0
    listing = capsys.readouterr().out
    assert all(f.path in listing for f in fetch.FILES) and "chapters: gemma" in listing


def test_the_book_cli_passes_data_commands_on(capsys):
    from ntkbook.__main__ import main as cli

    assert cli(["data", "list"]) == 0
    assert "tinystories/tinystories_train_head_2MiB.txt" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli(["data", "fetch", "--chapter", "no_such_chapter"])
