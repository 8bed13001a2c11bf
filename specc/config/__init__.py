"""Configs: composition (Hydra), schema, and specc's own OmegaConf resolvers."""

from __future__ import annotations


def cpu_path(what: str) -> str:
    """`${specc_cpu:python}`, `${specc_cpu:target}`, `${specc_cpu:draft}`: where `specc
    cpu-engine` and `specc tiny-models` put the CPU engine venv's python and the tiny models
    by default (the user's cache, named by their recipes' hashes; docs/real-engine.md)."""
    from specc.cpu import engine_venv, models

    paths = {"python": engine_venv.python_of(engine_venv.default_dir()),
             "bin": engine_venv.default_dir() / "bin",
             "target": models.default_dir() / "target",
             "draft": models.default_dir() / "draft"}
    if what not in paths:
        raise ValueError(f"specc_cpu: no {what!r}; use one of: {', '.join(paths)}")
    return str(paths[what])


def _register() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("specc_cpu", cpu_path, replace=True)


_register()
