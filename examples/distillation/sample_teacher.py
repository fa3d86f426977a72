"""Arm (b)'s data: sample the served teacher on the countdown training prompts (n per prompt,
temperature 1, the teacher's own distribution, as OPD scores it), for `flowrl reward` to score.

usage: python3 sample_teacher.py URL N OUT_ROWS OUT_RESPONSES
Writes one row per sample (the training row repeated) and one {"response": ...} per line, in order.
"""
import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

url, n, out_rows, out_responses = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [json.loads(line) for line in open('../countdown/data/train.jsonl')]


def sample(item):
    index, row = item
    prompt = '\n'.join(m['content'] for m in row['prompt'])  # how the trainer renders it (no chat template)
    body = json.dumps({'prompt': prompt, 'n': n, 'max_tokens': 16, 'temperature': 1.0, 'seed': index}).encode()
    request = urllib.request.Request(url + '/v1/completions', body, {'content-type': 'application/json'})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return [choice['text'] for choice in json.load(answer)['choices']]


with ThreadPoolExecutor(8) as pool:
    texts = list(pool.map(sample, enumerate(rows)))
with open(out_rows, 'w') as r, open(out_responses, 'w') as s:
    for row, samples in zip(rows, texts):
        for text in samples:
            r.write(json.dumps(row) + '\n')
            s.write(json.dumps({'response': text}) + '\n')
print(f'{sum(map(len, texts))} samples from {len(rows)} prompts', file=sys.stderr)
