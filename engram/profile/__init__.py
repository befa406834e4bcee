"""Row profiles: which rows of each Engram table a text corpus looks up, and how often.

``python -m engram.profile MODEL CORPUS... --out PROFILE`` tokenises the corpus with the
model's tokenizer, hashes it through the model's own hash (:mod:`.model`, Qwen3.8-Flash-
Next's PLE hash: :mod:`.ple_model`; :mod:`.counting`) and writes each table's most
looked-up rows with their counts (:mod:`.file`, ranked by :mod:`.ranking`), with the
identity of the hash they were counted through (:mod:`.identity`). A server started with
``--engram-offload ssd --engram-seed-profile PROFILE`` seeds each table's RAM cache with
them (:mod:`engram.tables.ssd.seeding`); one started with ``--engram-profile-out PROFILE``
writes the profile of what it served (:mod:`.tally`, :mod:`.upkeep`), and
``python -m engram.profile merge`` sums profiles (:mod:`.merge`).
"""

from engram.profile.file import FORMAT, VERSION, RowProfile, layer_rows, read_header
from engram.profile.identity import HashIdentity, TableIdentity
from engram.profile.make import DEFAULT_TOP, make_profile
from engram.profile.merge import merge_profiles
from engram.profile.model import load_tokenizer, model_hasher, profile_hash
from engram.profile.tally import RowTally
from engram.profile.upkeep import ProfileUpkeep, rank_path

__all__ = [
    "DEFAULT_TOP",
    "FORMAT",
    "VERSION",
    "HashIdentity",
    "ProfileUpkeep",
    "RowProfile",
    "RowTally",
    "TableIdentity",
    "layer_rows",
    "load_tokenizer",
    "make_profile",
    "merge_profiles",
    "model_hasher",
    "profile_hash",
    "rank_path",
    "read_header",
]
