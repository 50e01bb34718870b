"""A task's tenant (issue #38, item 3): the ``tenant`` header, read through ``Task.tenant`` and
checked like a room label when the task is made, so no store ever holds a tenant it cannot
serve in turn."""

from __future__ import annotations

import pytest

from tether.bridge import Task
from tether.bridge.custody import InvalidTask


def test_a_task_reads_its_tenant_from_its_header() -> None:
    assert Task("t", "hi", headers={"tenant": "acme", "sender": "u"}).tenant == "acme"
    assert Task("t", "hi", headers={"sender": "u"}).tenant is None
    longest = "a" + "_.:-b" * 25 + "zz"
    assert len(longest) == 128
    assert Task("t", "hi", headers={"tenant": longest}).tenant == longest


@pytest.mark.parametrize(
    "tenant", ["", "two words", "-leading-dash", "x" * 129, "caf\u00e9", "a/b", "line\nbreak"]
)
def test_a_tenant_that_is_not_a_label_is_refused_by_name(tenant: str) -> None:
    with pytest.raises(InvalidTask, match=r"^tenant .* is not valid: 1-128 characters"):
        Task("t", "hi", headers={"tenant": tenant})
