"""Packaging glue that pyproject.toml cannot express: the top-level migrations/
folder ships inside the package as ``trainplane.migrations``."""

from setuptools import find_packages, setup

setup(
    package_dir={"": "src", "trainplane.migrations": "migrations"},
    packages=[*find_packages("src"), "trainplane.migrations", "trainplane.migrations.versions"],
    package_data={
        "trainplane": ["py.typed"],
        "trainplane.migrations": ["script.py.mako"],
        "trainplane.dashboard": ["templates/*.html", "static/*"],
    },
)
