"""The documentation site's build hooks (``mkdocs.yml``): the reference pages generated from the code.

A page asks for a generated part with a marker line, ``<!-- generated: NAME -->``, which
:mod:`docs.hooks.site` replaces at build time with what :data:`docs.hooks.site.GENERATORS` makes of
the code: nothing in the reference is hand-copied, so it cannot drift. Not part of the wheel.
"""
