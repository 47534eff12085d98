from setuptools import find_packages, setup

setup(
    name="freeway",
    version="0.1.0",
    description="Freeway: isolating mice and elephant flows on Clos fabrics (os-ken apps, Mininet fabrics)",
    python_requires=">=3.11",
    packages=find_packages(include=["ryu_apps*", "topology*", "monitoring*", "experiments*"]),
    package_data={"ryu_apps.operators.web": ["*.html", "*.js", "*.css"], "experiments.ns3": ["*.cc"]},
    install_requires=open("requirements.txt").read().split(),
    extras_require={
        # experiments, benchmarks and their plots; the offline LP optimum; the networkx model
        "experiments": ["networkx>=3", "scipy>=1.10", "matplotlib>=3.6",
                        # sweeps: Dask distributed runs the tasks, results stored as Parquet (pyarrow), read by pandas
                        "distributed>=2024.1", "pyarrow>=14", "pandas>=2"],
        # the packet-level engine (freeway experiment --engine ns3): ns-3's own wheel, cppyy bindings
        "ns3": ["ns3==3.44.post0"],
        "test": ["pytest>=7", "hypothesis>=6", "ruff>=0.4", "schemathesis>=4,<5", "selenium>=4.20", "duckdb>=1"],
    },
    entry_points={"console_scripts": ["freeway = ryu_apps.cli:main"]},
)
