"""The views registry: each view has a stable id, unique, that the export command offers and
every lookup uses; its title is only shown."""

from __future__ import annotations

import pytest

from transformer_viewer.viewer.cli.export_views import CONFIGURE
from transformer_viewer.viewer.views import registry


def test_view_ids_are_unique_and_well_formed():
    ids = [v.id for v in registry.VIEWS]
    assert len(set(ids)) == len(ids), ids
    assert len({v.title for v in registry.VIEWS}) == len(ids)  # the View menu tells them apart too
    with pytest.raises(ValueError, match="lower-case"):
        registry.ViewEntry("Logit lens", "Logit lens", "m:C", "tab")


def test_views_are_found_by_id_not_by_title():
    for v in registry.VIEWS:
        assert registry.entry(v.id) is v
    with pytest.raises(KeyError):
        registry.entry("Logit lens")  # a title is not an id


def test_the_export_command_offers_views_by_id_and_configures_only_exportable_ones():
    offered = registry.exportable()
    assert all(offered[i].id == i and offered[i].export for i in offered)
    assert set(CONFIGURE) <= set(offered), set(CONFIGURE) - set(offered)
