"""Rejection sampling: keep the teacher samples `flowrl reward --json` scored 1, as SFT rows
(the training row with extra_info.response set to the teacher's text).

usage: python3 keep_correct.py ROWS RESPONSES SCORES.jsonl OUT.jsonl
"""
import json
import sys

rows_file, responses_file, scores_file, out = sys.argv[1:5]
rows = [json.loads(line) for line in open(rows_file)]
responses = [json.loads(line)['response'] for line in open(responses_file)]
scores = [json.loads(line) for line in open(scores_file) if line.strip().startswith('{')]
scores = [s for s in scores if 'score' in s and 'row' in s]
assert len(scores) == len(rows), (len(scores), len(rows))
kept = 0
with open(out, 'w') as f:
    for i, (row, response, score) in enumerate(zip(rows, responses, scores)):
        assert score['row'] == i + 1, score  # flowrl reward numbers rows from 1
        if score['score'] >= 1:
            f.write(json.dumps({**row, 'extra_info': {**row['extra_info'], 'response': response}}) + '\n')
            kept += 1
print(f'kept {kept} of {len(rows)} teacher samples ({kept / len(rows):.3f})', file=sys.stderr)
