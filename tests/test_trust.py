"""The trust rule (docs/security.md) on the kinds of reference a policy or env can be."""

from __future__ import annotations

import pytest

from fasteval.types.errors import UserInputError
from fasteval.types.trust import COMMAND_LINE, check_env_ref, check_policy_ref, is_code_ref


@pytest.mark.parametrize("ref", ["ws://127.0.0.1:8000", "openpi+ws://localhost:9000", "hf://lerobot/diffusion_pusht"])
def test_urls_name_servers_or_checkpoints_not_local_code(ref):
    """A served policy or a hub checkpoint runs no local code, so it needs no flag (its colons are a URL's)."""
    assert not is_code_ref(ref)
    check_policy_ref(ref, COMMAND_LINE, trust_remote_code=False)
    check_policy_ref(ref, "config file 'x.json'", trust_remote_code=False)


@pytest.mark.parametrize("ref, needle", [("./env.py:make", "from a file"), ("os:system", "not an env constructor")])
def test_code_refs_still_need_the_flag(ref, needle):
    assert is_code_ref(ref)
    with pytest.raises(UserInputError, match=needle):
        check_env_ref(ref, COMMAND_LINE, trust_remote_code=False)
    check_env_ref(ref, COMMAND_LINE, trust_remote_code=True)
