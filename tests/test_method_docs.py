"""Every method's module says where its authors' code is (repository and commit read) or that none was found."""

import sys

import pytest

from learngene.registry import get_method
from tests.conftest import own_methods


@pytest.mark.parametrize("name", own_methods())
def test_every_method_names_its_authors_code_or_says_none_was_found(name):
    doc = sys.modules[get_method(name).__module__].__doc__ or ""
    assert "Authors' code:" in doc, f'{name}: add an "Authors\' code:" line to {get_method(name).__module__}'
