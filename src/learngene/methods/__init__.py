"""Every method, one module per paper or baseline family; importing this package registers them all.

Each module here (a name not starting with ``_``) is imported, and its ``@register_method`` classes
register themselves: adding a method is adding a file. ``tests/test_registry.py`` fails for a module
that registers nothing; a helper shared by several methods belongs one level up (e.g.
:mod:`learngene.vit.attention_init`) or in a ``_private`` module here (``_drawn_start``), as does a part of one
method that its file would otherwise grow too long with (tal's ``_tal_graph``, pool's ``_pool_stitches``).
"""

import importlib
import pkgutil

MODULES = tuple(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))
for _name in MODULES:
    importlib.import_module(f"{__name__}.{_name}")
