"""Data loaders on the shared data: shapes, class counts, pixel statistics, clear errors."""

from __future__ import annotations

import dataclasses
import gzip
import shutil
import socket

import numpy as np
import pytest

from ntkbook import data
from ntkbook.data import fetch


@pytest.fixture(scope="module")
def mnist(data_dir):
    return data.load_mnist(data_dir)


def test_mnist(mnist):
    assert mnist.x_train.shape == (60000, 28, 28) and mnist.x_test.shape == (10000, 28, 28)
    assert mnist.x_train.dtype == np.float32
    assert 0.0 == mnist.x_train.min() and mnist.x_train.max() == 1.0
    assert abs(mnist.x_train.mean() - 0.1307) < 5e-4
    assert abs(mnist.x_train.std() - 0.3081) < 5e-4
    assert np.bincount(mnist.y_train).tolist()[:2] == [5923, 6742]
    assert np.bincount(mnist.y_test).sum() == 10000


def test_fashion_mnist(data_dir):
    ds = data.load_fashion_mnist(data_dir)
    assert ds.x_train.shape == (60000, 28, 28) and ds.x_test.shape == (10000, 28, 28)
    assert (np.bincount(ds.y_train) == 6000).all() and (np.bincount(ds.y_test) == 1000).all()
    assert abs(ds.x_train.mean() - 0.2860) < 5e-4
    assert ds.class_names[0] == "T-shirt/top"


def test_cifar10_subset(data_dir):
    ds = data.load_cifar10(data_dir)
    assert ds.x_train.shape == (10000, 32, 32, 3) and ds.x_test.shape == (2000, 32, 32, 3)
    assert (np.bincount(ds.y_train) == 1000).all() and (np.bincount(ds.y_test) == 200).all()
    # channel means of CIFAR-10 (0.4914, 0.4822, 0.4465); this JPEG subset is close to them
    np.testing.assert_allclose(ds.x_train.mean(axis=(0, 1, 2)), [0.4914, 0.4822, 0.4465], atol=0.01)
    assert "JPEG" in ds.source
    assert ds.class_names[:2] == ("airplane", "automobile")
    assert (np.bincount(ds.y_train[:100]) == 10).all()  # interleaved classes: prefixes balanced


def test_tinystories_and_digits(data_dir):
    stories = data.load_tinystories(data_dir)
    assert len(stories) == 2316 and all("<|endoftext|>" not in s for s in stories)
    digits = data.load_digits()
    assert digits.x_train.shape == (1437, 8, 8) and digits.x_test.shape == (360, 8, 8)
    assert digits.x_train.max() == 1.0


def test_class_subset(mnist):
    x, y = data.class_subset(mnist, [3, 8], 50, seed=1)
    assert x.shape == (100, 784) and x.dtype == np.float64
    assert np.bincount(y).tolist() == [50, 50] and y[:4].tolist() == [0, 1, 0, 1]
    assert 0.0 <= x.min() and x.max() <= 1.0
    x2, _ = data.class_subset(mnist, [3, 8], 50, seed=1)
    np.testing.assert_array_equal(x, x2)
    x3, _ = data.class_subset(mnist, [3, 8], 50, seed=2)
    assert not np.array_equal(x, x3)
    # labels follow the true classes
    idx3 = np.flatnonzero(mnist.y_train == 3)
    assert any(np.array_equal(x[0], mnist.x_train[i].reshape(-1)) for i in idx3)
    img, _ = data.class_subset(mnist, ["3", "8"], 5, split="test", flatten=False)
    assert img.shape == (10, 28, 28)
    with pytest.raises(ValueError, match="no class"):
        data.class_subset(mnist, ["cat"], 5)
    with pytest.raises(ValueError, match="only .* examples"):
        data.class_subset(mnist, [3], 10**6)


def test_missing_file_names_every_place(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_OFFLINE", "1")
    monkeypatch.setenv("NTKBOOK_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(data.DataNotFoundError) as err:
        data.load_mnist(tmp_path / "arg")
    msg = str(err.value)
    for place in (tmp_path / "arg" / "mnist", tmp_path / "env" / "mnist", tmp_path / "cache" / "ntkbook" / "mnist"):
        assert str(place) in msg
    assert "NTKBOOK_DATA" in msg and "mnist" in msg and "NTKBOOK_OFFLINE" in msg
    with pytest.raises(data.DataNotFoundError) as err:
        data.load_cifar10(tmp_path / "arg")
    msg = str(err.value)  # both variants looked for, downloads off, and the command that fetches it
    for name in ("cifar10-jpeg-q75-10k-2k.npz", "cifar10-lossless-10k-2k.npz"):
        assert str(tmp_path / "arg" / "cifar10" / name) in msg
    assert "NTKBOOK_OFFLINE" in msg and "make data" in msg


def test_download_failure_is_reported(tmp_path, monkeypatch):
    monkeypatch.delenv("NTKBOOK_OFFLINE", raising=False)
    monkeypatch.setenv("NTKBOOK_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with socket.socket() as s:  # a local port nobody listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = tuple(dataclasses.replace(f, urls=(f"http://127.0.0.1:{port}/{f.name}",))
                 if f.dataset == "mnist" else f for f in fetch.FILES)
    monkeypatch.setattr(fetch, "FILES", dead)
    with pytest.raises(data.DataNotFoundError,
                       match=f"fetching it failed: the download from http://127.0.0.1:{port}/train-images.* failed"):
        data.load_mnist(tmp_path / "arg")
    assert list((tmp_path / "cache" / "ntkbook" / "mnist").iterdir()) == []  # nothing left behind


def test_checksum_mismatch(tmp_path, data_dir):
    folder = tmp_path / "mnist"
    shutil.copytree(data_dir / "mnist", folder)
    target = folder / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(gzip.decompress(target.read_bytes()))
    raw[-1] = (raw[-1] + 1) % 10  # change one label
    target.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(data.ChecksumError, match="checksum mismatch for .*t10k-labels"):
        data.load_mnist(tmp_path)
    target.write_bytes(b"not gzip")
    with pytest.raises(data.ChecksumError, match="not a readable gzip"):
        data.load_mnist(tmp_path)


def test_cifar_checksum_mismatch(tmp_path):
    (tmp_path / "cifar10").mkdir()
    (tmp_path / "cifar10" / "cifar10-jpeg-q75-10k-2k.npz").write_bytes(b"x")
    with pytest.raises(data.ChecksumError, match="checksum mismatch"):
        data.load_cifar10(tmp_path)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown data set"):
        data.load("imagenet")
