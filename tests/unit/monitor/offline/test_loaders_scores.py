"""Loading offline logs: graded scores, numeric ok, duplicate keys, long task ids, the task key."""

import pytest

from monitor.offline.loaders import InputError, read_traces, read_trials


def write(tmp_path, text, name="log.jsonl"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_score_sets_success_at_the_threshold(tmp_path):
    path = write(tmp_path, '{"agent": "a", "task": "t1", "score": 0.75}\n{"agent": "a", "task": "t2", "score": 1}\n'
                           '{"agent": "a", "task": "t3", "score": 0.2, "ok": true}\n')
    traces, scores = read_trials(path, success_threshold=0.7)
    assert [t.success for t in traces] == [True, True, True] and scores == [0.75, 1.0, 0.2]
    traces, _ = read_trials(path)  # default threshold 1.0; an explicit ok wins over the score
    assert [t.success for t in traces] == [False, True, True]


def test_numeric_ok_is_accepted_and_other_numbers_are_named(tmp_path):
    path = write(tmp_path, "agent,task,ok\na,t1,1.0\na,t2,0.0\na,t3,1\na,t4,0\na,t5,true\n", "log.csv")
    assert [t.success for t in read_traces(path)] == [True, False, True, False, True]
    path = write(tmp_path, '{"agent": "a", "task": "t1", "ok": 1.0}\n{"agent": "a", "task": "t2", "ok": 0}\n')
    assert [t.success for t in read_traces(path)] == [True, False]
    bad = write(tmp_path, "agent,task,ok\na,t1,0.5\na,t2,2\n", "bad.csv")
    with pytest.raises(InputError) as err:
        read_traces(bad)
    text = str(err.value)
    assert ("bad.csv line 2: ok must be true or false (or 1/0, 1.0/0.0), got '0.5'; "
            "a graded outcome goes in score") in text
    assert "bad.csv line 3: ok must be true or false (or 1/0, 1.0/0.0), got '2'" in text
    assert "outcome is required" not in text
    with pytest.raises(InputError, match=r"line 1: ok must be true or false \(or 1/0, 1.0/0.0\), got 0.5"):
        read_traces(write(tmp_path, '{"agent": "a", "task": "t1", "ok": 0.5}\n'))


def test_bad_scores_are_named(tmp_path):
    path = write(tmp_path, '{"agent": "a", "task": "t1", "score": 1.5}\n{"agent": "a", "task": "t2", "score": "x"}\n'
                           '{"agent": "a", "task": "t3", "score": true}\n')
    with pytest.raises(InputError) as err:
        read_trials(path)
    text = str(err.value)
    for line, shown in ((1, "1.5"), (2, "'x'"), (3, "True")):
        assert f"line {line}: score must be a number in [0, 1], got {shown}" in text


def test_duplicate_keys_are_rejected_with_the_line(tmp_path):
    clean = '{"agent": "a", "task": "t1", "ok": true}\n'
    path = write(tmp_path, clean * 3 + '{"agent": "a", "task": "t2", "ok": false, "ok": true}\n')
    with pytest.raises(InputError, match=r"log.jsonl line 4: not valid JSON: key 'ok' appears more than once"):
        read_traces(path)
    # a string value holding '":' makes the batch count unsure: the per-line decoder decides, and accepts
    path = write(tmp_path, clean + '{"agent": "a", "task": "t2", "ok": false, "note": "x\\":y"}\n')
    assert [t.tags.get("note") for t in read_traces(path)] == [None, 'x":y']
    # whitespace before a colon, and a nested duplicate
    path = write(tmp_path, '{"agent" : "a", "task": "t1", "ok": true}\n{"agent": "a", "task": "t2", "ok": true,'
                           ' "tags": {"x": "1", "x": "2"}}\n')
    with pytest.raises(InputError, match="line 2: not valid JSON: key 'x' appears more than once"):
        read_traces(path)


def test_invalid_json_still_names_the_column(tmp_path):
    path = write(tmp_path, '{"agent": "a", "task": "t1", "ok": true}\n{"agent": "a", \n')
    with pytest.raises(InputError, match=r"line 2: not valid JSON \("):
        read_traces(path)


def test_long_task_ids_are_shortened_distinctly_and_task_key_composes(tmp_path):
    long_a, long_b = "x" * 240 + "a", "x" * 240 + "b"
    path = write(tmp_path, f'{{"agent": "agent-with-a-long-name", "task": "{long_a}", "ok": true}}\n'
                           f'{{"agent": "agent-with-a-long-name", "task": "{long_b}", "ok": false}}\n')
    traces = read_traces(path)
    assert len({t.task_id for t in traces}) == 2 and all(len(t.trace_id) <= 256 for t in traces)
    path = write(tmp_path, "agent,domain,task_id,ok\na,air,1,1\na,retail,1,0\n", "tau.csv")
    traces, _ = read_trials(path, mapping={"task_id": "task"}, task_key=("domain", "task"))
    assert [t.task_id for t in traces] == ["air/1", "retail/1"]
    with pytest.raises(InputError, match="line 2: --task-key field region is missing or empty"):
        read_trials(path, mapping={"task_id": "task"}, task_key=("region", "task"))
