"""Row profiles: which rows of each Engram table a text corpus looks up, and how often.

``python -m engram.profile MODEL CORPUS... --out PROFILE`` tokenises the corpus with the
model's tokenizer, hashes it through the model's own hash (:mod:`.model`,
:mod:`.counting`) and writes each table's most looked-up rows with their counts
(:mod:`.file`), with the identity of the hash they were counted through
(:mod:`.identity`). A server started with ``--engram-offload ssd
--engram-seed-profile PROFILE`` seeds each table's RAM cache with them
(:mod:`engram.ssd.seeding`).
"""

from engram.profile.file import FORMAT, VERSION, RowProfile, layer_rows, read_header
from engram.profile.identity import HashIdentity, TableIdentity
from engram.profile.make import DEFAULT_TOP, make_profile
from engram.profile.model import load_tokenizer, model_hasher

__all__ = [
    "DEFAULT_TOP",
    "FORMAT",
    "VERSION",
    "HashIdentity",
    "RowProfile",
    "TableIdentity",
    "layer_rows",
    "load_tokenizer",
    "make_profile",
    "model_hasher",
    "read_header",
]
