"""The search that found each PTB row's recipe: its records, sweeps, GPU queues, record
readers and their tests (research/README.md). Not part of the package (setuptools installs
hornn_dist alone); a package only so that its tests import as `research.tests`. It imports
hornn_dist, never the reverse."""
