"""The tasks of the influence experiments (Paper A): data sets and classes, targets, accuracy.

A task is a data set with all ten classes (``C = 10`` outputs, one-hot targets, cross-entropy) or
two of them (``C = 1`` output, targets ``+-1``, squared error). Its data is a balanced subset of
raw pixels in [0, 1] (subset seed 0); the two networks on it are named in :data:`MODELS`.
"""

from __future__ import annotations

import numpy as np

from ntkbook.errors import InputError

__all__ = ["TASKS", "TASK_LABELS", "MODELS", "ATTACK_LABELS", "task_classes", "input_dim",
           "task_data", "targets", "accuracy"]

#: task -> (data set, classes or None for all ten)
TASKS = {
    "mnist10": ("mnist", None),
    "cifar10": ("cifar10", None),
    "mnist_3v8": ("mnist", ("3", "8")),
    "cifar_auto_air": ("cifar10", ("automobile", "airplane")),
    "fmnist10": ("fashion-mnist", None),
}
#: task -> its name in tables and figures
TASK_LABELS = {
    "mnist10": "MNIST, 10 classes",
    "cifar10": "CIFAR-10, 10 classes",
    "mnist_3v8": "MNIST 3 vs 8",
    "cifar_auto_air": "CIFAR-10 automobile vs airplane",
    "fmnist10": "Fashion-MNIST, 10 classes",
}
#: model -> its name in tables and figures: the two-layer network on raw pixels or on attention
MODELS = {"relu": "2L-ReLU", "attn": "MLP-Attn"}
#: attack -> its name in tables and figures
ATTACK_LABELS = {"fgsm": "FGSM", "pgd": "PGD", "mim": "MIM"}


def task_classes(task: str):
    """``(data set, classes)`` of ``task``: the classes as a list of ints or class names."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; choose from {sorted(TASKS)}")
    dname, classes = TASKS[task]
    if classes is None:
        return dname, list(range(10))
    return dname, [int(c) if c.isdigit() else c for c in classes]


def input_dim(task: str) -> int:
    """Pixels per image of ``task``'s data set (CIFAR-10: 32 x 32 x 3; the MNISTs: 28 x 28)."""
    return 3072 if task_classes(task)[0] == "cifar10" else 784


def task_data(task: str, n_train: int, n_test: int):
    """``(x_train, labels_train, x_test, labels_test, C)``: raw pixels in [0, 1] (float64, flattened),
    integer labels, a balanced subset (subset seed 0); ``C = 1`` for binary tasks (targets +-1)."""
    from ntkbook import data

    dname, classes = task_classes(task)
    k = len(classes)
    if n_train % k or n_test % k:
        raise InputError(f"n_train and n_test must be multiples of the {k} classes of {task}")
    ds = data.load(dname)
    xtr, ltr = data.class_subset(ds, classes, n_train // k, split="train", seed=0)
    xte, lte = data.class_subset(ds, classes, n_test // k, split="test", seed=0)
    return xtr, ltr, xte, lte, (1 if k == 2 else k)


def targets(labels, C: int) -> np.ndarray:
    """Training/KRR targets: one-hot ``(n, C)`` for ``C > 1``, ``+-1`` ``(n, 1)`` (class 0 -> +1)."""
    labels = np.asarray(labels)
    if C == 1:
        return (1.0 - 2.0 * labels)[:, None].astype(np.float64)
    return np.eye(C)[labels]


def accuracy(out, labels, C: int) -> float:
    """Fraction of correct predictions of network outputs ``out`` ``(n, C)``: the arg-max class, or
    for ``C = 1`` class 0 when the output is >= 0."""
    out = np.asarray(out)
    pred = (out[:, 0] < 0).astype(int) if C == 1 else np.argmax(out, axis=1)
    return float(np.mean(pred == np.asarray(labels)))
