"""Engine knowledge lives in the adapters (specc/engines/): the compile stages name no engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specc.compile import rules
from specc.compile.matrix import SERVER_SECTIONS, spec_for as _spec_for
from specc.engines import get_engine

COMPILE = Path(rules.__file__).parent
ENGINE_NAMES = re.compile(r"sglang|vllm|[\"']sim[\"']", re.IGNORECASE)


@pytest.mark.parametrize("module", ["lower.py", "matrix.py", "placement.py", "estimate.py",
                                    "emit.py"])
def test_compile_stages_name_no_engine(module):
    text = (COMPILE / module).read_text()
    assert ENGINE_NAMES.findall(text) == [], module


def test_the_unsupported_target_fix_comes_from_the_adapter(compose):
    # vLLM's EAGLE-3 target allow-list is gone in 0.33; releases before 0.17.0 had it
    cfg = compose(["model_pair=kimi_k25_eagle3", "engine=vllm", "engine.version=0.16.0"])
    engine = get_engine("vllm", "0.16.0")
    spec = _spec_for({k: cfg[k] for k in SERVER_SECTIONS})
    (d,) = rules.draft_architecture(spec, engine)
    assert d.code == "ENGINE_TARGET_UNSUPPORTED" and d.hint == engine.target_unsupported_fix
    assert "engine=" in d.hint
