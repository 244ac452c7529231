"""Found in the user's-view review before shipping: each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.campaign import load_campaign
from runner.errors import CampaignError


def test_a_campaign_file_not_in_utf8_is_bad_input_naming_the_file(tmp_path: Path) -> None:
    # A file saved as UTF-16 or Latin-1 by an editor on the user's laptop, then copied over.
    path = tmp_path / "campaign.toml"
    path.write_bytes("[campaign]\nname = \"caf\xe9\"\n".encode("latin-1"))
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert info.value.file == str(path)
    assert info.value.line == 2
    assert "UTF-8" in info.value.reason
