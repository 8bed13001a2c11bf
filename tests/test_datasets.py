import json

import pytest
from hypothesis import given, settings, strategies as st

from specc.prompts.datasets import DatasetError, Prompt, load_prompts


def test_random_lengths_in_range_and_word_counts():
    ps = load_prompts("random", num=200, input_len=100, output_len=50, range_ratio=0.5, seed=3)
    assert len(ps) == 200
    for p in ps:
        assert 50 <= p.input_tokens <= 100
        assert 25 <= p.output_tokens <= 50
        assert len(p.text.split()) == p.input_tokens
    # both ends of the range are reachable, and lengths vary
    assert len({p.input_tokens for p in ps}) > 10


def test_random_deterministic_under_seed():
    a = load_prompts("random", num=20, input_len=64, output_len=32, range_ratio=0.1, seed=7)
    b = load_prompts("random", num=20, input_len=64, output_len=32, range_ratio=0.1, seed=7)
    c = load_prompts("random", num=20, input_len=64, output_len=32, range_ratio=0.1, seed=8)
    assert a == b
    assert a != c


def test_random_range_ratio_one_is_fixed_length():
    ps = load_prompts("random", num=10, input_len=17, output_len=9)
    assert {(p.input_tokens, p.output_tokens) for p in ps} == {(17, 9)}
    assert len({p.text for p in ps}) > 1  # prompts differ (no accidental prefix cache hits)


@settings(max_examples=60, deadline=None)
@given(input_len=st.integers(1, 300), output_len=st.integers(1, 300),
       ratio=st.floats(0.0, 1.0), seed=st.integers(0, 2**31), num=st.integers(0, 20))
def test_random_bounds_property(input_len, output_len, ratio, seed, num):
    ps = load_prompts("random", num=num, input_len=input_len, output_len=output_len,
                      range_ratio=ratio, seed=seed)
    assert len(ps) == num
    for p in ps:
        assert max(1, int(input_len * ratio)) <= p.input_tokens <= input_len
        assert max(1, int(output_len * ratio)) <= p.output_tokens <= output_len
        assert len(p.text.split()) == p.input_tokens


def test_random_bad_args():
    with pytest.raises(DatasetError):
        load_prompts("random", num=1, input_len=0, output_len=5)
    with pytest.raises(DatasetError):
        load_prompts("random", num=1, input_len=5, output_len=5, range_ratio=1.5)
    with pytest.raises(DatasetError, match="unknown dataset kind"):
        load_prompts("nope", num=1, input_len=5, output_len=5)


def test_dataset_error_is_value_error():
    assert issubclass(DatasetError, ValueError)


# --------------------------------------------------------------------------- jsonl

def test_jsonl_parsing(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        json.dumps({"prompt": "one two three", "output_len": 5}) + "\n"
        "\n"
        + json.dumps({"text": "a b", "max_tokens": 7}) + "\n"
        + json.dumps({"prompt": "x y z w"}) + "\n")
    ps = load_prompts("jsonl", num=3, input_len=0, output_len=11, path=str(f))
    assert ps == [Prompt("one two three", 3, 5), Prompt("a b", 2, 7), Prompt("x y z w", 4, 11)]


def test_jsonl_reuses_prompts_to_reach_num(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a b c"}\n{"prompt": "d e"}\n')
    ps = load_prompts("jsonl", num=5, input_len=0, output_len=4, path=str(f))
    assert [p.input_tokens for p in ps] == [3, 2, 3, 2, 3]
    assert len(load_prompts("jsonl", num=1, input_len=0, output_len=4, path=str(f))) == 1


def test_jsonl_bad_json_names_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "ok"}\n\n{"prompt": oops}\n')
    with pytest.raises(DatasetError) as ei:
        load_prompts("jsonl", num=1, input_len=0, output_len=4, path=str(f))
    msg = str(ei.value)
    assert f"{f}:3" in msg and "bad JSON" in msg and "\n" not in msg


def test_jsonl_missing_prompt_key(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n{"question": "no"}\n')
    with pytest.raises(DatasetError, match=r"p\.jsonl:2: .*prompt"):
        load_prompts("jsonl", num=1, input_len=0, output_len=4, path=str(f))


def test_jsonl_bad_output_len(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok", "output_len": -3}\n')
    with pytest.raises(DatasetError, match=r":1: 'output_len'"):
        load_prompts("jsonl", num=1, input_len=0, output_len=4, path=str(f))


def test_jsonl_no_output_len_anywhere(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n')
    with pytest.raises(DatasetError, match=":1:"):
        load_prompts("jsonl", num=1, input_len=0, output_len=0, path=str(f))


def test_jsonl_empty_and_missing(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_text("\n\n")
    with pytest.raises(DatasetError, match="empty"):
        load_prompts("jsonl", num=1, input_len=0, output_len=4, path=str(f))
    with pytest.raises(DatasetError, match="no such file"):
        load_prompts("jsonl", num=1, input_len=0, output_len=4, path=str(tmp_path / "nope"))
    with pytest.raises(DatasetError, match="path is required"):
        load_prompts("jsonl", num=1, input_len=0, output_len=4)


# --------------------------------------------------------------------------- sharegpt

def _conv(human, gpt):
    return {"conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}]}


def test_sharegpt_parsing_and_filtering(tmp_path):
    data = [
        _conv("one two three four five", "a b c d e f"),      # ok: 5 in, 6 out
        _conv("too short", "a b c d e f"),                    # prompt < 4: skipped
        _conv("w x y z", "no"),                               # reply < 4: skipped
        {"conversations": [{"from": "gpt", "value": "x"}]},   # no human turn
        {"id": "no conversations"},
        {"conversations": [{"from": "system", "value": "s"},
                           {"from": "human", "value": "p q r s t u"},
                           {"from": "gpt", "value": "1 2 3 4"}]},  # ok: 6 in, 4 out
    ]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(data))
    ps = load_prompts("sharegpt", num=2, input_len=0, output_len=0, path=str(f), seed=0)
    assert sorted((p.input_tokens, p.output_tokens) for p in ps) == [(5, 6), (6, 4)]
    # output_len > 0 overrides the reply's length (bench_serving's --sharegpt-output-len)
    ps = load_prompts("sharegpt", num=2, input_len=0, output_len=50, path=str(f))
    assert {p.output_tokens for p in ps} == {50}
    # the seed shuffles deterministically
    a = load_prompts("sharegpt", num=2, input_len=0, output_len=0, path=str(f), seed=1)
    b = load_prompts("sharegpt", num=2, input_len=0, output_len=0, path=str(f), seed=1)
    assert a == b


def test_sharegpt_errors(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text('[\n {"conversations": []},\n oops\n]')
    with pytest.raises(DatasetError) as ei:
        load_prompts("sharegpt", num=1, input_len=0, output_len=0, path=str(f))
    assert f"{f}:3" in str(ei.value) and "bad JSON" in str(ei.value)
    f.write_text("[]")
    with pytest.raises(DatasetError, match="empty"):
        load_prompts("sharegpt", num=1, input_len=0, output_len=0, path=str(f))
    f.write_text(json.dumps([_conv("a", "b")]))
    with pytest.raises(DatasetError, match="no usable conversations"):
        load_prompts("sharegpt", num=1, input_len=0, output_len=0, path=str(f))
    f.write_text('{"conversations": []}')
    with pytest.raises(DatasetError, match="JSON list"):
        load_prompts("sharegpt", num=1, input_len=0, output_len=0, path=str(f))
