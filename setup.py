"""What pyproject.toml cannot say: the checkout's top-level conf/ ships as the package
`specc.conf` (specc/conf/ in the wheel), found beside the rest of specc when installed."""

from setuptools import find_namespace_packages, setup

setup(packages=find_namespace_packages(include=["specc*", "hydra_plugins*"]) + ["specc.conf"],
      package_dir={"specc.conf": "conf"})
