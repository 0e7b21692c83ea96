"""The ``transduce`` command line: one console script whose sub-commands live in the packages they drive."""
