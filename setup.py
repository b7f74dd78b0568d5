"""The packages pyproject.toml cannot list itself: ``packexp`` and its subpackages, and the
top-level ``conf/`` (each config group a folder) shipped inside the wheel as ``packexp/conf``
(``packexp.conf_dir`` finds it there when there is no checkout). The rest is in pyproject.toml."""

from pathlib import Path

from setuptools import find_packages, setup

groups = sorted(d.name for d in Path("conf").iterdir() if d.is_dir())
setup(packages=[*find_packages(include=["packexp", "packexp.*"]), "packexp.conf",
                *(f"packexp.conf.{g}" for g in groups)],
      package_dir={"packexp.conf": "conf"})
