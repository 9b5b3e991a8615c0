"""A package outside learngene that adds a method and a data source through entry points (see its dist-info).

Importing it imports no torch: the data source's loader is named, and imported only when it loads.
"""

from learngene.registry import DataSource

STRIPES = DataSource(
    "toy_stripes", "learngene_toy_plugin.data:load", help="stripes of a period per class (a plugin's source)"
)
