"""The use cases, one function each, that the Python API and the command line share.

A CLI handler parses its flags, calls one of these, writes what it returns and says so; whatever it
writes, the same Python call writes. :mod:`.compare`: which start wins for an ancestry, data and sizes.
"""
