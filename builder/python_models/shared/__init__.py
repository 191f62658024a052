"""Modules several Python-backend models need, one file each: a model's package links to the ones it
imports, so the repository writer copies them beside its ``model.py``."""
