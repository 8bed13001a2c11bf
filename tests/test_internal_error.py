"""A crash inside specc is said to be specc's bug (exit 70, the traceback kept in a
file), never dressed as a config error: a divide-by-zero in the tuner once read
`error CONFIG_INVALID at <overrides>: division by zero`."""

from __future__ import annotations

from specc import __main__ as cli
from specc import exits


def test_a_crash_in_the_job_is_one_line_naming_specc_and_its_traceback_file(
        tmp_path, monkeypatch, capsys):
    import specc.compile.pipeline as pipeline

    def crash(config):
        return 1 / 0

    monkeypatch.setattr(pipeline, "compile_config", crash)
    code = cli.job({}, tmp_path, {"multirun": False})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exits.INTERNAL == 70
    assert len(err) == 1 and err[0].startswith("error INTERNAL: specc failed: "
                                               "ZeroDivisionError: division by zero"), err
    assert "CONFIG_INVALID" not in err[0] and "not in your config" in err[0]
    (kept,) = tmp_path.glob("specc-crash-*.txt")
    assert str(kept) in err[0]
    text = kept.read_text()
    assert "Traceback" in text and "def crash" not in text and "1 / 0" in text
