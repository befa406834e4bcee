"""The cluster's keys: made by the first `up`, private to their user, kept for the next;
a key file of the clients' own from the spec; none that others may read."""

from __future__ import annotations

import os
import random

import pytest
from sglang_engram.cluster.keys import client_key, key_files, load_keys
from sglang_engram.cluster.spec import ClusterError, ClusterSpecError, parse_spec
from sglang_engram.cluster.state import HOME_ENV


def _spec(**router: object):
    return parse_spec(
        {
            "name": f"k{random.randint(0, 10**6)}",
            "model": "/m",
            "transfer_backend": "fake",
            "router": router,
            "workers": [{"role": "prefill"}, {"role": "decode"}],
        }
    )


def test_up_makes_private_keys_once_and_keeps_them(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    spec = _spec()
    keys = load_keys(spec)
    admin, client = key_files(spec)
    assert (admin.parent, admin.name, client.name) == (
        tmp_path / spec.name,
        "admin.key",
        "client.key",
    )
    for path in (admin, client):
        assert path.stat().st_mode & 0o777 == 0o600
    assert len(keys.admin) >= 40 and len(keys.client) >= 40 and keys.admin != keys.client
    assert load_keys(spec) == keys and client_key(spec) == keys.client  # kept
    assert keys.admin not in repr(keys)
    os.chmod(admin, 0o644)
    with pytest.raises(ClusterError, match=r"the key file .*admin.key is not private \(mode 644"):
        load_keys(spec)


def test_a_client_key_file_of_the_spec(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    own = tmp_path / "clients.key"
    secret = f"clients-{random.randint(0, 10**9)}"
    own.write_text(secret + "\n")
    own.chmod(0o600)
    spec = _spec(api_key_file=str(own))
    keys = load_keys(spec)
    assert keys.client == secret and key_files(spec)[1] == own
    assert not (tmp_path / "home" / spec.name / "client.key").exists()
    own.chmod(0o640)
    with pytest.raises(ClusterSpecError, match="is not private"):
        load_keys(spec)
    own.write_text("two words\n")
    own.chmod(0o600)
    with pytest.raises(ClusterSpecError, match="holds no key"):
        load_keys(spec)
    with pytest.raises(ClusterSpecError, match="cannot read the key file"):
        load_keys(_spec(api_key_file=str(tmp_path / "missing")))
