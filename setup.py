"""Package layout that pyproject.toml cannot express: the driver is installed as `nicsim.driver`
from the top-level `driver/` folder, so nicsim never installs a bare top-level `driver` package
that could shadow (or be shadowed by) another project's. Everything else is in pyproject.toml.
"""

from setuptools import find_namespace_packages, find_packages, setup

setup(
    packages=find_packages(include=["nicsim", "nicsim.*"])
    + ["nicsim.driver"] + [f"nicsim.driver.{p}" for p in find_packages("driver")]
    # driver/facade is a directory on a program's path, not a package: its packages too.
    + [f"nicsim.driver.{p}" for p in find_namespace_packages("driver", include=["facade*"])],
    package_dir={"nicsim.driver": "driver"},
    # `nicsim exec` puts driver/facade on a program's path: its start-up hook comes along.
    package_data={"nicsim.driver": ["facade/sitecustomize.py", "facade/README.md"]},
)
