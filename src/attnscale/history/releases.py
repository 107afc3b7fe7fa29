"""The old releases whose attention scale factor we check, frozen by file name and sha256.

Why frozen: a claim such as "BERT divided by sqrt(d_k) from its first release" should rest on
the bytes that were published, not on memory or on today's code.  Each entry names one
distribution file on PyPI, its size and its sha256, measured by downloading it once with
``pip download --no-deps`` (wheels with ``--only-binary :all:``, the sdist with
``--no-binary :all:``) and hashing it.  The cache (:mod:`.cache`) refuses any file whose hash
differs, so every later reading is of exactly these bytes.

``date`` is the month the distribution was built, read from its archive (the newest file
time inside the wheel zip or sdist tar); it agrees with the release month on PyPI.

What is deliberately not here:

* tensor2tensor ``1.0`` is the earliest release on PyPI and has only an sdist (no wheel); we
  take that sdist.  ``1.0.1.dev1`` (a pre-release) and ``1.0.1`` (a wheel, the same month)
  add nothing to the question.
* every release of pytorch-pretrained-bert (0.1.1 to 0.6.2) and of pytorch-transformers (0.7.0
  to 1.2.0) is here; of transformers, the first release of each major version up to 4.
* transformers 2.0.0, 3.0.0 and 4.0.0 all have pure-Python wheels, so no sdist is needed.
* beside them, read only (their attention is not run): fairseq 0.6.1 (the first release with its
  ``MultiheadAttention`` on PyPI), timm 0.3.0 (its first with ``vision_transformer.py``) and
  x-transformers 0.0.10 (its first on PyPI).  mup is left out: its package (1.0.0) holds no
  attention, the 1/d of muP lives in its examples.

The twenty-four files come to 4,952,128 bytes (about 5 MB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("wheel", "sdist")
LANGUAGES = ("pytorch", "tensorflow")

# The import name of each distribution: the folder that holds its Python package.
IMPORT_NAMES = {
    "pytorch-pretrained-bert": "pytorch_pretrained_bert",
    "pytorch-transformers": "pytorch_transformers",
    "transformers": "transformers",
    "mesh-tensorflow": "mesh_tensorflow",
    "tensor2tensor": "tensor2tensor",
    "fairseq": "fairseq",
    "timm": "timm",
    "x-transformers": "x_transformers",
}
# The releases whose attention is run as well as read: Hugging Face's BERT, whose self-attention the
# probe builds (:mod:`.probe`); the other PyTorch code here is read only.
PROBED_PACKAGES = ("pytorch-pretrained-bert", "pytorch-transformers", "transformers")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MONTH = re.compile(r"^(19|20)\d\d-(0[1-9]|1[0-2])$")


@dataclass(frozen=True)
class Release:
    """One published distribution file: what to download and the bytes it must have."""

    package: str
    version: str
    filename: str
    sha256: str
    kind: str
    date: str
    language: str
    size: int

    def __post_init__(self):
        if self.package not in IMPORT_NAMES:
            raise ValueError(f"unknown package {self.package!r}; known: {', '.join(sorted(IMPORT_NAMES))}")
        if self.kind not in KINDS:
            raise ValueError(f"kind of {self.filename!r} is {self.kind!r}; give one of {KINDS}")
        if self.language not in LANGUAGES:
            raise ValueError(f"language of {self.filename!r} is {self.language!r}; give one of {LANGUAGES}")
        if not _SHA256.match(self.sha256):
            raise ValueError(f"sha256 of {self.filename!r} is not 64 lower-case hex digits: {self.sha256!r}")
        if not _MONTH.match(self.date):
            raise ValueError(f"date of {self.filename!r} is {self.date!r}; give YYYY-MM")
        if self.size <= 0:
            raise ValueError(f"size of {self.filename!r} must be positive, got {self.size}")
        wheel_name = self.filename.endswith(".whl")
        if wheel_name != (self.kind == "wheel"):
            raise ValueError(f"{self.filename!r} does not look like a {self.kind}")
        if "/" in self.filename or "\\" in self.filename:
            raise ValueError(f"filename {self.filename!r} must be a bare file name")

    @property
    def import_name(self) -> str:
        """The top-level Python package inside the distribution."""
        return IMPORT_NAMES[self.package]

    @property
    def probed(self) -> bool:
        """Whether its attention is run (a PyTorch release the probe can build), not only read."""
        return self.language == "pytorch" and self.package in PROBED_PACKAGES

    @property
    def label(self) -> str:
        """``package version``, the way a person names a release."""
        return f"{self.package} {self.version}"

    @property
    def requirement(self) -> str:
        """The pip requirement that names exactly this release."""
        return f"{self.package}=={self.version}"


RELEASES: tuple[Release, ...] = (
    Release("tensor2tensor", "1.0", "tensor2tensor-1.0.tar.gz",
            "cc8c1d6d46172293be65c377bc70ca63f8d7978ce9c1cfb4b753db7f3e2bca1a",
            "sdist", "2017-06", "tensorflow", 115442),
    Release("pytorch-pretrained-bert", "0.1.1", "pytorch_pretrained_bert-0.1.1-py3-none-any.whl",
            "b6580020797366d64c9d65a67ecee7bdc708a8d16a7d3da1007cb40ef85d544b",
            "wheel", "2018-11", "pytorch", 36495),
    Release("pytorch-pretrained-bert", "0.1.2", "pytorch_pretrained_bert-0.1.2-py3-none-any.whl",
            "02ad709ec67d25d31c56e72e42815e67c45020fc40668c528b6aac0d9592721f",
            "wheel", "2018-11", "pytorch", 36478),
    Release("pytorch-pretrained-bert", "0.2.0", "pytorch_pretrained_bert-0.2.0-py3-none-any.whl",
            "8d5725e47fb833a4f38bb3b987d5f1a3dcd27d42530d08dcba0404b7edbe2a6d",
            "wheel", "2018-11", "pytorch", 36715),
    Release("pytorch-pretrained-bert", "0.3.0", "pytorch_pretrained_bert-0.3.0-py3-none-any.whl",
            "a8547402519be9c0b2fc22cd3bb8b3b1ddda1189364940d11f6e7d8883c93f82",
            "wheel", "2018-11", "pytorch", 37123),
    Release("mesh-tensorflow", "0.0.5", "mesh_tensorflow-0.0.5-py2.py3-none-any.whl",
            "a2e338f3911b6f30fcd9c3e065c929a060ff02e1977dff0bde820904110c3d72",
            "wheel", "2018-12", "tensorflow", 95990),
    Release("pytorch-pretrained-bert", "0.4.0", "pytorch_pretrained_bert-0.4.0-py3-none-any.whl",
            "cc66a6de585b5a43d4cff0fc6c0426dc3d35214d270cf207a33d7ceace8930fa",
            "wheel", "2018-12", "pytorch", 45171),
    Release("pytorch-pretrained-bert", "0.5.0", "pytorch_pretrained_bert-0.5.0-py3-none-any.whl",
            "662c96d1085a13628d2915eb3d0af442c0e2961c02131e1077f551251e80ea95",
            "wheel", "2019-02", "pytorch", 97833),
    Release("pytorch-pretrained-bert", "0.5.1", "pytorch_pretrained_bert-0.5.1-py3-none-any.whl",
            "89331120c15fd73c709cfe9309bcfc403855484fa75c7bed27d930d7e2541000",
            "wheel", "2019-02", "pytorch", 86383),
    Release("pytorch-pretrained-bert", "0.6.0", "pytorch_pretrained_bert-0.6.0-py3-none-any.whl",
            "7d56ed3245571556cf3915dc1c2122e5c2928ff2a18bb7fd3c8e18b823cbbf6c",
            "wheel", "2019-02", "pytorch", 114273),
    Release("pytorch-pretrained-bert", "0.6.1", "pytorch_pretrained_bert-0.6.1-py3-none-any.whl",
            "138c9702cc8da0c949a3b266a0c6e436aee4ae1c722b5d3eb1e47fb4b2b0f197",
            "wheel", "2019-02", "pytorch", 114282),
    Release("fairseq", "0.6.1", "fairseq-0.6.1.tar.gz",
            "7133d1b163805535e13e91068c03c4b9cddec327a8748df27d90560215f3f5a6",
            "sdist", "2019-02", "pytorch", 132864),
    Release("pytorch-pretrained-bert", "0.6.2", "pytorch_pretrained_bert-0.6.2-py3-none-any.whl",
            "ddd86f2f4ca595a2ad05d48c35d4f5c1c5f150bef79d56e3159701840a574d06",
            "wheel", "2019-04", "pytorch", 123793),
    Release("pytorch-transformers", "0.7.0", "pytorch_transformers-0.7.0-py3-none-any.whl",
            "f21184abaf9704b9fb7a1cf361cf3e6d4cfad33f8c1324180314744ed951f922",
            "wheel", "2019-07", "pytorch", 150690),
    Release("pytorch-transformers", "1.0.0", "pytorch_transformers-1.0.0-py3-none-any.whl",
            "9e36f64a497d3e43aed5effd826d9d9ba0e0b335c279359a56562c8238966c78",
            "wheel", "2019-07", "pytorch", 137195),
    Release("pytorch-transformers", "1.1.0", "pytorch_transformers-1.1.0-py3-none-any.whl",
            "cd670284de1b1b0bfe2f4a27531e873b5a76cd163960661971a340f33c3f4290",
            "wheel", "2019-08", "pytorch", 158066),
    Release("pytorch-transformers", "1.2.0", "pytorch_transformers-1.2.0-py3-none-any.whl",
            "bdb606fe1f2d27586710ed03cfa49dbbd80215c38bf965862daada0c137fd7ce",
            "wheel", "2019-09", "pytorch", 176430),
    Release("transformers", "2.0.0", "transformers-2.0.0-py3-none-any.whl",
            "c73b420037170f7c2dfd08e6b017e3f343460cdaa019e243d7d484786abaa62d",
            "wheel", "2019-09", "pytorch", 290354),
    Release("mesh-tensorflow", "0.1.0", "mesh_tensorflow-0.1.0-py2.py3-none-any.whl",
            "52be4cb9d3c38cd5e74dbe88323b64c6c023503189fab29aff6e7cb2d0840693",
            "wheel", "2019-10", "tensorflow", 221203),
    Release("transformers", "3.0.0", "transformers-3.0.0-py3-none-any.whl",
            "679f0060e47e740f389f858adff2296d4a393015e5bbe7dac9143220b8caf7af",
            "wheel", "2020-06", "pytorch", 754564),
    Release("transformers", "4.0.0", "transformers-4.0.0-py3-none-any.whl",
            "5b8618e8fe34de078ccb214f2f6c27bcb6753980aaeb9271ce07169a91b74afc",
            "wheel", "2020-11", "pytorch", 1352122),
    Release("timm", "0.3.0", "timm-0.3.0-py3-none-any.whl",
            "8b3bbf21954c6db5f5e5732c59475aa99d323b14f762ebb5402bbee00382e347",
            "wheel", "2020-10", "pytorch", 247285),
    Release("x-transformers", "0.0.10", "x_transformers-0.0.10-py3-none-any.whl",
            "12fc885e5e009e14a6d51487e7df1c31009b9ea30036494ebb18c03d5b757854",
            "wheel", "2020-11", "pytorch", 6135),
    Release("mesh-tensorflow", "0.1.21", "mesh_tensorflow-0.1.21-py3-none-any.whl",
            "747d46696ad260ae59a566fc1726749b99080973b07aae098be5714931a3ad80",
            "wheel", "2022-05", "tensorflow", 385242),
)


def find_release(package: str, version: str, releases=RELEASES) -> Release:
    """The release ``package==version`` from ``releases``; ValueError naming the known ones if absent."""
    for release in releases:
        if release.package == package and release.version == version:
            return release
    known = ", ".join(r.requirement for r in releases)
    raise ValueError(f"no release {package}=={version} in the list; known: {known}")
